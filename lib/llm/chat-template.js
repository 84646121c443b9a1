'use strict';
// Chat prompts from the Jinja chat template of a model file
// (tokenizer.chat_template), rendered by @huggingface/jinja with the
// variables transformers' apply_chat_template gives a template. The
// template's own behaviour is kept (SmolLM2's adds a default system message
// when the conversation has none).

const { Template } = require('@huggingface/jinja');

// Parsed templates by source: a chat renders the same template every turn.
/** @type {Map<string, Template>} */
const cache = new Map();
const CACHE_LIMIT = 16;

/**
 * @param {string} template
 * @returns {Template}
 */
function compile(template) {
  let t = cache.get(template);
  if (!t) {
    try {
      t = new Template(template);
    } catch (caught) {
      const e = /** @type {Error | null | undefined} */ (caught);
      throw new Error(`the chat template cannot be parsed: ${e && e.message}`, { cause: e });
    }
    // The oldest entry; the cache is full, so there is one.
    if (cache.size >= CACHE_LIMIT) cache.delete(/** @type {string} */ (cache.keys().next().value));
    cache.set(template, t);
  }
  return t;
}

/**
 * Renders a conversation into the prompt text of the model.
 *
 * @param {string | undefined} template the Jinja source
 *   (tokenizer.chat_template); a TypeError where there is none
 * @param {Array<{ role: string, content: string }>} messages
 * @param {{ addGenerationPrompt?: boolean, bosToken?: string, eosToken?: string,
 *   variables?: Record<string, unknown> }} [options]
 *   addGenerationPrompt: end with the start of the assistant's turn;
 *   variables: more variables for the template (tools, ...)
 * @returns {string}
 */
function renderChat(template, messages, { addGenerationPrompt = true, bosToken = '', eosToken = '', variables } = {}) {
  if (typeof template !== 'string' || template.length === 0) {
    throw new TypeError('template must be a non-empty string (the model has no chat template?)');
  }
  if (!Array.isArray(messages)) throw new TypeError('messages must be an array of { role, content }');
  for (const [i, m] of messages.entries()) {
    if (!m || typeof m.role !== 'string' || typeof m.content !== 'string') {
      throw new TypeError(`messages[${i}] must be { role: string, content: string }`);
    }
  }
  const t = compile(template);
  try {
    return t.render({
      ...variables,
      messages,
      add_generation_prompt: addGenerationPrompt,
      bos_token: bosToken,
      eos_token: eosToken,
    });
  } catch (caught) {
    const e = /** @type {Error | null | undefined} */ (caught);
    throw new Error(`the chat template failed to render: ${e && e.message}`, { cause: e });
  }
}

module.exports = { renderChat };
