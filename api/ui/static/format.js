// Formatting helpers: bytes, durations, times, percentages, ids and labels as the pages write them.
import { now } from "./clock.js";

export function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let x = n;
  let i = 0;
  while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
  const digits = i === 0 || Number.isInteger(x) || x >= 100 ? 0 : 1;
  return `${x.toFixed(digits)} ${units[i]}`;
}

export function fmtDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export const secondsSince = (iso) => (now() - Date.parse(iso)) / 1000;
export const ago = (iso) => `${fmtDuration(secondsSince(iso))} ago`;

export function fmtExpiry(lease) {
  if (lease.ended_at) return `ended ${ago(lease.ended_at)}`;
  const left = -secondsSince(lease.expires_at);
  return left > 0 ? `in ${fmtDuration(left)}` : `${fmtDuration(-left)} ago`;
}

export const fmtTime = (iso) => new Date(iso).toLocaleString([], { hour12: false });
export const pct = (part, whole) => (whole > 0 ? (100 * part) / whole : 0);
export const shortId = (id) => (id.length > 12 ? `${id.slice(0, 8)}…` : id);
export const labelsText = (labels) => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");

// "4GiB", "512 MiB", "2g", "1073741824" -> bytes; NaN when it is none of these.
export function parseBytes(text) {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?$/i.exec(text.trim());
  if (!m) return Number.NaN;
  const power = " kmgtp".indexOf((m[2] || " ").toLowerCase());
  return Math.round(Number(m[1]) * 1024 ** power);
}

// The last part of a path: a dax device's name from its chardev.
export const baseName = (path) => String(path).split("/").pop();
