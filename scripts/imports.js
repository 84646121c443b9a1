#!/usr/bin/env node
// The crate's import arrows, file to file, and the circles among them.
//
//   node scripts/imports.js            circles (exit 1 if any) and the floors
//   node scripts/imports.js --arrows   every arrow, "from -> to"
//   node scripts/imports.js --dot      the graph in Graphviz's dot language
//
// An arrow A -> B means that A names something defined in B: through a
// `use` tree, or a path written in the code (`crate::x::y`, `super::y`, or
// a child module's name). A path is resolved to the deepest file that
// exists along it, so `crate::graph::op::Op` is an arrow to
// src/graph/op.rs and `crate::graph::GraphBuilder` one to
// src/graph/mod.rs. `mod x;` declarations are not arrows (a parent owns
// its children; it imports from them only where it names their items),
// and neither is a child's use of a module that encloses it (the room's
// own shared items: `super::lim`, `crate::backend::cpu::Tensor` from
// inside backend/cpu/): a circle is one between rooms.
// Comments and string literals are ignored; `#[cfg(test)]` code counts
// like any other, since tests are part of the house too.
'use strict';
const fs = require('fs');
const path = require('path');
const { strip } = require('./rust-source');

const root = path.join(__dirname, '..', 'src');

function walk(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else if (e.name.endsWith('.rs')) out.push(p);
  }
  return out;
}

// The module path of a file: src/graph/ops/conv.rs -> [graph, ops, conv];
// src/graph/ops/mod.rs -> [graph, ops]; src/lib.rs -> [].
function modPath(file) {
  const rel = path.relative(root, file).replace(/\\/g, '/').replace(/\.rs$/, '');
  const parts = rel.split('/');
  const last = parts[parts.length - 1];
  if (last === 'mod' || (parts.length === 1 && last === 'lib')) parts.pop();
  return parts;
}

const files = walk(root);
const byMod = new Map(files.map((f) => [modPath(f).join('::'), f]));

// The file that defines module path `segs` or, failing that, its deepest
// ancestor that is a file.
function resolve(segs) {
  for (let n = segs.length; n >= 0; n--) {
    const f = byMod.get(segs.slice(0, n).join('::'));
    if (f) return f;
  }
  return null;
}


// Expands a `use` tree's text into its paths (each an array of segments).
function expandUse(text) {
  const paths = [];
  let i = 0;
  function tree(prefix) {
    const segs = [...prefix];
    for (;;) {
      while (/\s/.test(text[i] || '')) i++;
      if (text[i] === '{') {
        i++;
        for (;;) {
          while (/[\s,]/.test(text[i] || '')) i++;
          if (text[i] === '}' || i >= text.length) {
            i++;
            return;
          }
          tree(segs);
        }
      }
      const m = /^(\*|[A-Za-z_][A-Za-z0-9_]*)/.exec(text.slice(i));
      if (!m) return;
      i += m[0].length;
      segs.push(m[1]);
      while (/\s/.test(text[i] || '')) i++;
      if (text.startsWith('::', i)) {
        i += 2;
        continue;
      }
      const as = /^as\s+[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i));
      if (as) i += as[0].length;
      paths.push(segs);
      return;
    }
  }
  tree([]);
  return paths;
}

function arrowsOf(file) {
  const src = strip(fs.readFileSync(file, 'utf8'));
  const self = modPath(file);
  // Child modules declared in this file (`mod x;` or `mod x {`).
  const children = new Set([...src.matchAll(/\bmod\s+([A-Za-z_]\w*)\s*[;{]/g)].map((m) => m[1]));
  // Inline `mod x { ... }` blocks: offset ranges and their names, so that
  // `super` inside `mod tests { }` means this file's module.
  const inline = [];
  for (const m of src.matchAll(/\bmod\s+([A-Za-z_]\w*)\s*\{/g)) {
    let depth = 0;
    let j = m.index + m[0].length - 1;
    for (; j < src.length; j++) {
      if (src[j] === '{') depth++;
      else if (src[j] === '}' && --depth === 0) break;
    }
    inline.push({ start: m.index, end: j, name: m[1] });
  }
  const modAt = (off) => {
    const segs = [...self];
    for (const b of inline) if (off > b.start && off < b.end) segs.push(b.name);
    return segs;
  };
  const absolute = (segs, off) => {
    const here = modAt(off);
    if (segs[0] === 'crate') return segs.slice(1);
    if (segs[0] === 'self') return [...here, ...segs.slice(1)];
    if (segs[0] === 'super') {
      let base = here;
      let k = 0;
      while (segs[k] === 'super') (base = base.slice(0, -1), k++);
      return [...base, ...segs.slice(k)];
    }
    if (children.has(segs[0]) && here.length === self.length) return [...self, ...segs];
    return null; // std, a dependency, or a local name
  };
  // The files of the modules that enclose this one: a child naming what
  // its enclosing module provides is inside that room, not an arrow.
  const ancestors = new Set();
  for (let n = self.length - 1; n >= 0; n--) {
    const f = byMod.get(self.slice(0, n).join('::'));
    if (f) ancestors.add(f);
  }
  const targets = new Set();
  const add = (segs, off) => {
    const abs = absolute(segs, off);
    if (!abs) return;
    const t = resolve(abs);
    if (t && t !== file && !ancestors.has(t)) targets.add(t);
  };
  // `use` trees (not `mod` lines).
  const spans = [];
  for (const m of src.matchAll(/\buse\s+([^;]*);/g)) {
    spans.push([m.index, m.index + m[0].length]);
    for (const p of expandUse(m[1])) add(p, m.index);
  }
  const inUse = (off) => spans.some(([a, b]) => off >= a && off < b);
  // Paths written in the code.
  for (const m of src.matchAll(/(?<![\w:])((?:crate|super|self|[a-z_]\w*)(?:::[A-Za-z_]\w*)+)/g)) {
    if (inUse(m.index)) continue;
    add(m[1].split('::'), m.index);
  }
  return targets;
}

const rel = (f) => path.relative(path.join(root, '..'), f).replace(/\\/g, '/');
const graph = new Map(files.map((f) => [f, arrowsOf(f)]));

// Tarjan's strongly connected components.
function sccs() {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  function visit(v) {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v)) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const c = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        c.push(w);
      } while (w !== v);
      out.push(c);
    }
  }
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}

const arg = process.argv[2];
if (arg === '--arrows') {
  for (const [f, ts] of graph) for (const t of ts) console.log(`${rel(f)} -> ${rel(t)}`);
  process.exit(0);
}
if (arg === '--dot') {
  console.log('digraph imports {');
  for (const [f, ts] of graph) for (const t of ts) console.log(`  "${rel(f)}" -> "${rel(t)}";`);
  console.log('}');
  process.exit(0);
}

const circles = sccs().filter((c) => c.length > 1);
const arrows = [...graph.values()].reduce((n, s) => n + s.size, 0);
console.log(`${files.length} files, ${arrows} arrows, ${circles.length} circle(s)`);
for (const c of circles) {
  console.log(`\ncircle of ${c.length} files:`);
  for (const f of c.sort()) {
    const inside = [...graph.get(f)].filter((t) => c.includes(t)).map(rel);
    console.log(`  ${rel(f)} -> ${inside.join(', ')}`);
  }
}
if (circles.length === 0) {
  // Floors: a file's floor is one above the highest file it imports.
  const floor = new Map();
  const height = (f) => {
    if (floor.has(f)) return floor.get(f);
    floor.set(f, 0);
    let h = 0;
    for (const t of graph.get(f)) h = Math.max(h, height(t) + 1);
    floor.set(f, h);
    return h;
  };
  files.forEach(height);
  const top = Math.max(...floor.values());
  console.log(`\n${top + 1} floors, top first:`);
  for (let h = top; h >= 0; h--) {
    const on = files.filter((f) => floor.get(f) === h).map(rel).sort();
    console.log(`  ${h}: ${on.join(' ')}`);
  }
}
process.exit(circles.length ? 1 : 0);
