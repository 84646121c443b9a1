#!/usr/bin/env node
// The glibc versions a Linux ELF shared object needs, read from its
// .gnu.version_r section (SHT_GNU_verneed): each needed library and the
// symbol versions it must provide (GLIBC_2.17, GLIBC_2.34, ...). The
// loader refuses the object on a glibc older than the highest of them.
// Plain JS, no objdump.
//
//   node scripts/glibc-floor.js FILE...   prints each file's highest GLIBC_x.y
'use strict';
const fs = require('fs');

const SHT_GNU_VERNEED = 0x6ffffffe;

/**
 * The version needs of an ELF file: [{ file: 'libc.so.6', versions:
 * ['GLIBC_2.2.5', ...] }, ...], in the order the section lists them. Throws
 * on a file that is not ELF; an ELF without the section needs nothing.
 */
function versionNeeds(buf) {
  if (buf.length < 64 || buf.readUInt32BE(0) !== 0x7f454c46) throw new Error('not an ELF file');
  const is64 = buf[4] === 2;
  if (buf[4] !== 1 && !is64) throw new Error(`unknown ELF class ${buf[4]}`);
  const le = buf[5] === 1;
  if (buf[5] !== 1 && buf[5] !== 2) throw new Error(`unknown ELF data encoding ${buf[5]}`);
  const u16 = (o) => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
  const u32 = (o) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  const addr = (o) => (is64 ? Number(le ? buf.readBigUInt64LE(o) : buf.readBigUInt64BE(o)) : u32(o));

  const shoff = addr(is64 ? 0x28 : 0x20);
  const shentsize = u16(is64 ? 0x3a : 0x2e);
  const shnum = u16(is64 ? 0x3c : 0x30);
  const section = (i) => {
    const h = shoff + i * shentsize;
    if (h + shentsize > buf.length) throw new Error(`section header ${i} lies beyond the file`);
    return is64
      ? { type: u32(h + 4), offset: addr(h + 0x18), size: addr(h + 0x20), link: u32(h + 0x28), info: u32(h + 0x2c) }
      : { type: u32(h + 4), offset: u32(h + 0x10), size: u32(h + 0x14), link: u32(h + 0x18), info: u32(h + 0x1c) };
  };
  const cstr = (o) => {
    const end = buf.indexOf(0, o);
    if (end < 0) throw new Error(`unterminated string at ${o}`);
    return buf.toString('latin1', o, end);
  };

  const needs = [];
  for (let i = 0; i < shnum; i++) {
    const s = section(i);
    if (s.type !== SHT_GNU_VERNEED) continue;
    const strtab = section(s.link).offset;
    // Elf_Verneed: vn_version u16, vn_cnt u16, vn_file u32, vn_aux u32,
    // vn_next u32; Elf_Vernaux: vna_hash u32, vna_flags u16, vna_other u16,
    // vna_name u32, vna_next u32 (the same layout in ELF32 and ELF64).
    let vn = s.offset;
    for (let n = 0; n < s.info; n++) {
      if (vn + 16 > s.offset + s.size) throw new Error('verneed entry beyond its section');
      const cnt = u16(vn + 2);
      const entry = { file: cstr(strtab + u32(vn + 4)), versions: [] };
      let aux = vn + u32(vn + 8);
      for (let k = 0; k < cnt; k++) {
        entry.versions.push(cstr(strtab + u32(aux + 8)));
        aux += u32(aux + 12);
      }
      needs.push(entry);
      const next = u32(vn + 12);
      if (next === 0) break;
      vn += next;
    }
  }
  return needs;
}

/** [2, 17] for 'GLIBC_2.17'; null for other names (GLIBC_PRIVATE, GCC_3.0). */
function glibcVersion(name) {
  const m = /^GLIBC_(\d+(?:\.\d+)+)$/.exec(name);
  return m ? m[1].split('.').map(Number) : null;
}

function compareVersions(a, b) {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] || 0) - (b[i] || 0);
    if (d) return d;
  }
  return 0;
}

/** Every GLIBC_x.y the file needs, lowest first, without repeats. */
function glibcVersionsNeeded(file) {
  const names = new Set();
  for (const { versions } of versionNeeds(fs.readFileSync(file))) {
    for (const v of versions) if (glibcVersion(v)) names.add(v);
  }
  return [...names].sort((a, b) => compareVersions(glibcVersion(a), glibcVersion(b)));
}

/** The highest GLIBC_x.y the file needs ('2.17'), or null if it needs none. */
function glibcFloor(file) {
  const all = glibcVersionsNeeded(file);
  return all.length ? all[all.length - 1].slice('GLIBC_'.length) : null;
}

/** The newest glibc a Linux gnu package may need: RHEL 8 and Debian 10 have it. */
const MAX_GLIBC = '2.28';

module.exports = { MAX_GLIBC, versionNeeds, glibcVersion, compareVersions, glibcVersionsNeeded, glibcFloor };

if (require.main === module) {
  const files = process.argv.slice(2);
  if (!files.length) {
    console.error('usage: node scripts/glibc-floor.js FILE...');
    process.exit(2);
  }
  for (const f of files) console.log(`${f}: ${glibcFloor(f) ? `GLIBC_${glibcFloor(f)}` : 'needs no glibc version'}`);
}
