// Colours for tenants and hosts on the memory map: distinct, and stable while the set changes little.

// None of them the UI's reds, ambers or greys.
const PALETTE = ["#4e79a7", "#59a14f", "#b07aa1", "#76b7b2", "#9c755f", "#edc948", "#af7aa1",
  "#2f4b7c", "#7fb800", "#d45087", "#00a3c4", "#8c6bb1"];

function hashOf(key) {
  let hash = 0;
  for (const ch of String(key)) hash = (hash * 31 + ch.codePointAt(0)) | 0;
  return Math.abs(hash);
}

// key -> colour for a set of keys: each key starts at its hash's colour (so it keeps it while
// the set changes little) and moves on to the next free one when another key took it.
export function coloursFor(keys) {
  const taken = new Map();
  const out = new Map();
  for (const key of [...new Set(keys)].sort()) {
    if (taken.size === PALETTE.length) {
      out.set(key, `hsl(${hashOf(key) % 360} 55% 50%)`); // more keys than colours
      continue;
    }
    let i = hashOf(key) % PALETTE.length;
    while (taken.has(i)) i = (i + 1) % PALETTE.length;
    taken.set(i, key);
    out.set(key, PALETTE[i]);
  }
  return out;
}
