"""Embed a corpus with wasmind inside Ray Data: one wasmind module per actor, the texts streamed
through `map_batches`. The vectors are the ones one process computes, in the corpus's order,
whatever the number of actors or machines (the module is deterministic and holds no state between
batches).

    python ray_embed.py MODEL_DIR corpus.txt vectors.npy --actors 2
    python ray_embed.py MODEL_DIR corpus.txt vectors.npy --actors 16 --address auto   # a cluster

`corpus.txt` holds one text per line; MODEL_DIR is a local Model2Vec folder (model.safetensors,
tokenizer.json, config.json) that every node can read at the same path. On a cluster, install the
`wasmind` wheel on every node (or pass it in `runtime_env={"pip": [...]}`) and start the script
with `--address auto` on the head node (or `ray job submit`); nothing else changes.
"""

import argparse

import numpy as np
import ray

import wasmind


class Embedder:
    """A Ray Data callable class: Ray builds one per actor, so each actor loads the model once."""

    def __init__(self, model_dir):
        self.model = wasmind.StaticModel.from_pretrained(model_dir)

    def __call__(self, batch):
        return {'embedding': self.model.encode(list(batch['text']))}


def embed(ds, model_dir, actors, batch_size=2048):
    """`ds` (a Ray Dataset with a `text` column) with an `embedding` column added, computed by
    `actors` actors. Set `DataContext.execution_options.preserve_order` to keep the input order."""
    return ds.map_batches(Embedder, fn_constructor_args=(model_dir,),
                          compute=ray.data.ActorPoolStrategy(size=actors),
                          batch_size=batch_size, batch_format='numpy')


def vectors(ds):
    """The `embedding` column of `ds` as one float32 array, in the dataset's order."""
    parts = [ray.get(ref)['embedding'] for ref in ds.to_numpy_refs()]
    return np.concatenate(parts) if parts else np.empty((0, 0), np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('model_dir')
    ap.add_argument('corpus', help='a text file, one text per line')
    ap.add_argument('output', help='where to write the vectors (.npy)')
    ap.add_argument('--actors', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=2048)
    ap.add_argument('--address', default=None, help="a Ray cluster's address ('auto' on a node)")
    args = ap.parse_args()
    ray.init(address=args.address)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    ds = ray.data.read_text(args.corpus)
    out = vectors(embed(ds, args.model_dir, args.actors, args.batch_size))
    np.save(args.output, out)
    print(f'{out.shape[0]} texts embedded into {args.output} ({out.shape[1]} dimensions)')


if __name__ == '__main__':
    main()
