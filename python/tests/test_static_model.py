"""StaticModel against model2vec: every corpus text, three models (f32, f16, a vocabulary-
quantized MiniLM distillation); batches, threads, the progress bar, the config overrides."""

import numpy as np
import pytest

import wasmind
from conftest import MIN_COSINE, cosine, fixture, reference

MODELS = ['potion-base-8M', 'potion-base-8M-f16', 'm2v-minilm-128-vq']


@pytest.mark.parametrize('name', MODELS)
def test_matches_model2vec(name):
    ref = reference(f'{name}.json')
    rows = ref['rows']
    assert len(rows) == 631
    model = wasmind.StaticModel.from_pretrained(fixture(f'models/{name}'))
    assert model.dim == model.embedding_dim == ref['dim']
    got = model.encode([r['text'] for r in rows])
    assert got.dtype == np.float32 and got.shape == (len(rows), ref['dim'])
    worst, zeros = 1.0, 0
    for i, r in enumerate(rows):
        want = np.asarray(r['embedding'], dtype=np.float64)
        if not want.any():
            zeros += 1
            assert not got[i].any(), f'{name}: text {i} should embed to zeros'
            continue
        c = cosine(got[i], want)
        worst = min(worst, c)
        assert c >= MIN_COSINE, f'{name}: text {i}: cosine {c}'
    print(f'{name}: {len(rows)} texts, worst cosine {worst:.8f}, {zeros} zero vectors')


def test_single_text_batches_and_threads():
    rows = reference('potion-base-8M.json')['rows']
    texts = [r['text'] for r in rows]
    one = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'))
    full = one.encode(texts)
    assert np.array_equal(one.encode(texts, batch_size=37), full)
    v = one.encode(texts[3])
    assert v.shape == (one.dim,) and np.array_equal(v, full[3])
    assert one.encode([]).shape == (0, one.dim)
    two = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'), n_threads=2)
    try:
        assert two._rt.threaded
        assert np.array_equal(two.encode(texts, batch_size=100), full), 'threads change the bits'
    finally:
        two.close()


def test_progress_bar(capsys):
    texts = [r['text'] for r in reference('potion-base-8M.json')['rows']]
    model = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'))
    model.encode(texts, batch_size=100)
    assert capsys.readouterr().err == ''
    model.encode(texts, show_progress_bar=True, batch_size=100)
    err = capsys.readouterr().err
    assert 'Encoding' in err and '631/631' in err and '100%' in err, err
    assert err.count('\r') == 8, err  # the start and one redraw per batch of 100


def test_config_overrides():
    texts = [r['text'] for r in reference('potion-base-8M.json')['rows'][:50]]
    plain = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'), normalize=False)
    unit = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'), normalize=True)
    assert not plain.normalize and unit.normalize
    a, b = plain.encode(texts), unit.encode(texts)
    norms = np.linalg.norm(b, axis=1)
    assert np.allclose(norms[norms > 0], 1, atol=1e-5)
    assert not np.allclose(np.linalg.norm(a, axis=1)[norms > 0], 1, atol=1e-3)
    for x, y in zip(a, b):
        assert cosine(x, y) >= MIN_COSINE
    with pytest.raises(ValueError):
        plain.encode(texts, normalize=True)
    with pytest.raises(ValueError):
        plain.encode(texts, max_length=16)
    short = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'), max_length=4)
    assert not np.allclose(short.encode(texts[0]), a[0])
