#!/usr/bin/env node
// Allocations on the CPU backend that the input may size, and are neither
// fallible nor listed (ARCHITECTURE.md, "No input takes the process down").
//
//   node scripts/alloc-lint.js          findings not in the allowlist (exit 1
//                                       if any), then a one-line summary
//   node scripts/alloc-lint.js --all    every finding, listed or not
//
// What it reads: src/backend/cpu/**/*.rs, less the test code: files named
// tests.rs or under a tests/ folder, and each item written right after a
// `#[cfg(test)]` (with any other attributes between) that is a `mod`, `fn`,
// `impl`, `struct`, `enum`, `use`, `const` or `static`: the item is skipped
// through its matching `}` (or its `;`). A `#[cfg(test)]` on a match arm or
// a field is not an item and skips nothing. Comments and string literals
// are blanked first.
//
// What it finds (each an infallible allocation whose length is an
// expression, not the fallible helpers `util::try_vec`, `try_filled`,
// `try_copy`, `Buf::try_vec_for_overwrite`, ...):
//
//   vec![<elem>; <n>]         unless <n> is a constant expression
//   Vec::with_capacity(<n>)   unless <n> is a constant expression
//   <expr>.to_vec()           always (its length is the slice's)
//
// A constant expression is made only of integer literals (`8`, `4usize`,
// `0x10`, `1_000`), SCREAMING_CASE names or paths (`L`, `Self::W`,
// `super::POS`), the operators + - * / % << >> and parentheses: bounded by a
// constant, so not a finding. `vec![a, b, c]` (a list) is not a finding
// either. `.collect()`, `Vec::from` and `.to_owned()` are not looked at:
// whether they build a Vec, and of what length, is not visible in the text.
//
// The allowlist, scripts/alloc-lint-allow.txt: one line per site,
//
//   <path from the repository root>: <fragment> | <why it is bounded>
//
// `#` starts a comment line; blank lines are ignored. An entry covers one
// finding in that file whose text contains the fragment: the text is the
// site's first source line, trimmed, or the call's own text (from `vec![`,
// `Vec::with_capacity(` or the receiver of `.to_vec()` to its closing
// bracket) with its whitespace collapsed to single spaces. Two sites with
// the same text need two entries; where several entries match one finding,
// the one with the longest fragment covers it. The lint fails on an entry
// without a reason, on a malformed one, and on a stale one (it covers no
// finding: the site was fixed or its text changed; remove or update it).
'use strict';
const fs = require('fs');
const path = require('path');
const { strip } = require('./rust-source');

const repo = path.join(__dirname, '..');
const scanRoot = path.join(repo, 'src', 'backend', 'cpu');
const allowFile = path.join(__dirname, 'alloc-lint-allow.txt');
const showAll = process.argv.includes('--all');

function walk(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name !== 'tests') out.push(...walk(p));
    } else if (e.name.endsWith('.rs') && e.name !== 'tests.rs') out.push(p);
  }
  return out.sort();
}


const OPEN = { '(': ')', '[': ']', '{': '}' };
const CLOSE = new Set([')', ']', '}']);

// The offset just past the bracket that closes the one at `i`.
function matching(s, i) {
  let depth = 0;
  for (let j = i; j < s.length; j++) {
    if (OPEN[s[j]]) depth++;
    else if (CLOSE.has(s[j]) && --depth === 0) return j + 1;
  }
  return s.length;
}

// Blanks each `#[cfg(test)]` item (see the top of the file).
function dropTestItems(s) {
  const re = /#\[cfg\(test\)\]/g;
  let m;
  while ((m = re.exec(s))) {
    let i = m.index + m[0].length;
    // Further attributes between the cfg and the item.
    for (;;) {
      while (/\s/.test(s[i] || '')) i++;
      if (s[i] === '#' && s[i + 1] === '[') i = matching(s, i + 1);
      else break;
    }
    const rest = s.slice(i, i + 200);
    if (!/^(pub(\([^)]*\))?\s+)?(unsafe\s+)?(mod|fn|impl|struct|enum|use|const|static)\b/.test(rest)) continue;
    // The item's end: its first `{ ... }` or its `;`, outside brackets.
    let j = i;
    let end = s.length;
    let depth = 0;
    for (; j < s.length; j++) {
      const c = s[j];
      if (c === '{' && depth === 0) {
        end = matching(s, j);
        break;
      }
      if (c === ';' && depth === 0) {
        end = j + 1;
        break;
      }
      if (c === '(' || c === '[' || c === '<') depth++;
      else if ((c === ')' || c === ']' || c === '>') && depth > 0 && s[j - 1] !== '-') depth--;
    }
    s = s.slice(0, m.index) + s.slice(m.index, end).replace(/[^\n]/g, ' ') + s.slice(end);
    re.lastIndex = end;
  }
  return s;
}

// The top-level `;` in `vec![ ... ]`'s body, or -1 (a list).
function topSemicolon(body) {
  let depth = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (OPEN[c]) depth++;
    else if (CLOSE.has(c)) depth--;
    else if (c === ';' && depth === 0) return i;
  }
  return -1;
}

function isConstant(expr) {
  const tokens = expr.match(/[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*|0[xob][0-9a-fA-F_]+\w*|\d[\d_]*\w*|<<|>>|\S/g) || [];
  return (
    tokens.length > 0 &&
    tokens.every(
      (t) =>
        /^[+\-*/%()]$|^<<$|^>>$/.test(t) ||
        /^(0[xob][0-9a-fA-F_]+|\d[\d_]*)(u8|u16|u32|u64|u128|usize|i8|i16|i32|i64|i128|isize)?$/.test(t) ||
        /^(?:(?:[A-Za-z_][A-Za-z0-9_]*)::)*_*[A-Z][A-Z0-9_]*$/.test(t),
    )
  );
}

// The start of the receiver of a method call whose `.` is at `dot`: back
// over a chain of names, paths, calls and indexing (`x[a..b]`, `v.f()`).
function receiverStart(s, dot) {
  let i = dot;
  for (;;) {
    while (i > 0 && /\s/.test(s[i - 1])) i--;
    const c = s[i - 1];
    if (c === ')' || c === ']') {
      let depth = 0;
      let j = i - 1;
      for (; j >= 0; j--) {
        if (CLOSE.has(s[j])) depth++;
        else if (OPEN[s[j]] && --depth === 0) break;
      }
      i = j;
      continue;
    }
    if (/\w/.test(c || '')) {
      while (i > 0 && /\w/.test(s[i - 1])) i--;
      if (s.slice(i - 2, i) === '::') {
        i -= 2;
        continue;
      }
      if (s[i - 1] === '.' && s[i - 2] !== '.') {
        i--;
        continue;
      }
      if (s[i - 1] === '&' || s[i - 1] === '*') i--;
      return i;
    }
    return i;
  }
}

function lineOf(s, i) {
  let n = 1;
  for (let j = 0; j < i; j++) if (s[j] === '\n') n++;
  return n;
}

// The crate's own allocators that abort on failure, each with a fallible
// form beside it (`try_` + the name, or `util::try_*`).
const INFALLIBLE = ['f32_for_overwrite', 'vec_for_overwrite', 'f16_from_f32'];

function findings(file) {
  const src = fs.readFileSync(file, 'utf8');
  const s = dropTestItems(strip(src));
  const lines = src.split('\n');
  const rel = path.relative(repo, file).replace(/\\/g, '/');
  const out = [];
  const add = (start, end, kind) => {
    const line = lineOf(s, start);
    out.push({
      file: rel,
      line,
      kind,
      text: lines[line - 1].trim(),
      call: src.slice(start, end).replace(/\s+/g, ' ').trim(),
    });
  };
  let m;
  const vecRe = /\bvec!\s*\[/g;
  while ((m = vecRe.exec(s))) {
    const open = m.index + m[0].length - 1;
    const end = matching(s, open);
    const body = s.slice(open + 1, end - 1);
    const semi = topSemicolon(body);
    if (semi >= 0 && !isConstant(body.slice(semi + 1))) add(m.index, end, 'vec!');
  }
  const capRe = /\bVec(?:::<[^>]*>)?::with_capacity\s*\(/g;
  while ((m = capRe.exec(s))) {
    const open = m.index + m[0].length - 1;
    const end = matching(s, open);
    if (!isConstant(s.slice(open + 1, end - 1))) add(m.index, end, 'with_capacity');
  }
  const toVecRe = /\.\s*(to_vec|to_f32_vec)\s*\(\s*\)/g;
  while ((m = toVecRe.exec(s))) {
    add(receiverStart(s, m.index), m.index + m[0].length, m[1]);
  }
  const ownRe = new RegExp(`\\b(${INFALLIBLE.join('|')})\\s*(?:::<[^>]*>)?\\s*\\(`, 'g');
  while ((m = ownRe.exec(s))) {
    if (/\bfn\s+$/.test(s.slice(Math.max(0, m.index - 8), m.index))) continue;
    add(m.index, matching(s, m.index + m[0].length - 1), m[1]);
  }
  return out.sort((a, b) => a.line - b.line);
}

function readAllow() {
  const entries = [];
  const errors = [];
  if (!fs.existsSync(allowFile)) return { entries, errors };
  fs.readFileSync(allowFile, 'utf8')
    .split('\n')
    .forEach((raw, k) => {
      const line = raw.trim();
      if (!line || line.startsWith('#')) return;
      const where = `scripts/alloc-lint-allow.txt:${k + 1}`;
      const m = /^([^\s:]+\.rs):\s*(.*)$/.exec(line);
      if (!m) return errors.push(`${where}: not "path: fragment | reason": ${line}`);
      const bar = m[2].lastIndexOf(' | ');
      const fragment = (bar < 0 ? m[2] : m[2].slice(0, bar)).trim();
      const reason = bar < 0 ? '' : m[2].slice(bar + 3).trim();
      if (!fragment) return errors.push(`${where}: no fragment: ${line}`);
      if (!reason) return errors.push(`${where}: no reason (after " | "): ${line}`);
      entries.push({ where, file: m[1], fragment, reason, used: false });
    });
  return { entries, errors };
}

const all = walk(scanRoot).flatMap(findings);
const { entries, errors } = readAllow();
const unlisted = [];
for (const f of all) {
  const fits = entries
    .filter((e) => !e.used && e.file === f.file && (f.text.includes(e.fragment) || f.call.includes(e.fragment)))
    .sort((a, b) => b.fragment.length - a.fragment.length);
  if (fits.length) {
    fits[0].used = true;
    f.allowed = fits[0];
  } else unlisted.push(f);
}
for (const e of entries) {
  if (!e.used) errors.push(`${e.where}: stale (no finding in ${e.file} is left whose text contains "${e.fragment}")`);
}

for (const f of showAll ? all : unlisted) {
  const note = f.allowed ? `   [allowed: ${f.allowed.reason}]` : '';
  console.log(`${f.file}:${f.line}: ${f.text}${note}`);
}
for (const e of errors) console.log(e);
console.log(
  `alloc-lint: ${all.length} allocation sites sized by an expression in src/backend/cpu, ` +
    `${all.length - unlisted.length} allowlisted, ${unlisted.length} not; ` +
    `${errors.length} allowlist error${errors.length === 1 ? '' : 's'}`,
);
process.exit(unlisted.length || errors.length ? 1 : 0);
