'use strict';
// Rust source text as the project's source scripts read it
// (scripts/imports.js, scripts/alloc-lint.js).

/**
 * `src` with comments, string and char literals blanked out (spaces),
 * keeping offsets and line breaks, so that what is left is code.
 * @param {string} src
 * @returns {string}
 */
function strip(src) {
  let out = '';
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    const d = src[i + 1];
    if (c === '/' && d === '/') {
      const j = src.indexOf('\n', i);
      const end = j < 0 ? src.length : j;
      out += ' '.repeat(end - i);
      i = end;
    } else if (c === '/' && d === '*') {
      let depth = 1;
      let j = i + 2;
      while (j < src.length && depth > 0) {
        if (src[j] === '/' && src[j + 1] === '*') (depth++, (j += 2));
        else if (src[j] === '*' && src[j + 1] === '/') (depth--, (j += 2));
        else j++;
      }
      out += src.slice(i, j).replace(/[^\n]/g, ' ');
      i = j;
    } else if (c === 'r' && /^r#*"/.test(src.slice(i, i + 10)) && !/\w/.test(src[i - 1] || '')) {
      const m = /^r(#*)"/.exec(src.slice(i));
      const close = '"' + m[1];
      const j = src.indexOf(close, i + m[0].length);
      const end = j < 0 ? src.length : j + close.length;
      out += src.slice(i, end).replace(/[^\n]/g, ' ');
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      while (j < src.length && src[j] !== '"') j += src[j] === '\\' ? 2 : 1;
      out += src.slice(i, j + 1).replace(/[^\n]/g, ' ');
      i = j + 1;
    } else if (c === "'" && /^'(\\.[^']*|[^'\\])'/.test(src.slice(i, i + 12))) {
      const m = /^'(\\.[^']*|[^'\\])'/.exec(src.slice(i, i + 12));
      out += ' '.repeat(m[0].length);
      i += m[0].length;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

module.exports = { strip };
