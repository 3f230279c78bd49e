// setGrammar through glue/wasmind.js in Node: a JSON schema, json_object mode and a GBNF
// grammar constrain the next reply; an invalid grammar throws with its position.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fixture } from './reference.mjs';
import { load } from '../wasmind.js';

const model = readFileSync(fixture('models/SmolLM2-135M-Instruct.Q4_1.gguf'));

test('setGrammar: schema, json and GBNF replies; errors name the position', async () => {
  const wm = await load({ threaded: false });
  try {
    wm.loadModel(model, { context: 1024 });
    wm.setSampler({ temperature: 0, repeatPenalty: 1 });
    const schema = { type: 'object', properties: { sentiment: { enum: ['positive', 'negative', 'neutral'] } },
      required: ['sentiment'] };
    wm.addMessage('user', 'Classify: the food was great.');
    wm.setGrammar({ schema });
    const reply = JSON.parse(wm.replyText({ maxTokens: 200 }));
    assert.ok(schema.properties.sentiment.enum.includes(reply.sentiment), JSON.stringify(reply));
    assert.equal(wm.chatStats().state, 'eog');

    wm.resetChat();
    wm.addMessage('user', 'Is the sky blue?');
    wm.setGrammar({ grammar: 'root ::= "yes" | "no"' });
    assert.ok(['yes', 'no'].includes(wm.replyText({ maxTokens: 8 })));

    wm.resetChat();
    wm.addMessage('user', 'A cat as JSON, one key.');
    wm.setGrammar({ json: true });
    assert.ok(wm.replyText({ maxTokens: 24 }).startsWith('{'));
    assert.equal(wm.chatStats().grammar, true);

    assert.throws(() => wm.setGrammar({ grammar: 'root ::= "a" | foo' }), /undefined rule 'foo'.*byte 15/);
    wm.setGrammar(); // clears
  } finally {
    await wm.close();
  }
});
