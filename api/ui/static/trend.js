// A pool's capacity over the last hour (GET /v1/capacity/history): leased and scrubbing bytes
// stacked over the pool's size, as a small SVG chart on the overview's pool card. Drawn by
// hand (no chart library: the UI has no build step and fetches nothing from the internet).
import { fmtBytes } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 480;
const H = 56;

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  el.append(...kids);
  return el;
}

// samples: [{at, size, leased, scrubbing, free}], oldest first; windowS: how far back the x axis
// goes; periodS: how often the daemon samples.
export function trendChart(samples, windowS, periodS) {
  const end = samples.length ? samples[samples.length - 1].at : 0;
  const start = end - windowS;
  const top = Math.max(1, ...samples.map((s) => s.size));
  const x = (at) => ((at - start) / windowS) * W;
  const y = (bytes) => H - (bytes / top) * H;
  // An area from `low` up to `high` (functions of a sample), in steps: each sample stands for
  // the period before it (the daemon has seen nothing of the time before its first sample).
  const steps = (f) => samples.flatMap((s) => [[Math.max(0, x(s.at - periodS)), y(f(s))], [x(s.at), y(f(s))]]);
  const area = (low, high) => {
    if (!samples.length) return "";
    const upper = steps(high);
    const lower = steps(low).reverse();
    return `M${[...upper, ...lower].map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join("L")}Z`;
  };
  const last = samples[samples.length - 1];
  const chart = svg("svg", {
    class: "trend", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
    "data-samples": samples.length,
    "aria-label": last ? `Last hour: now ${fmtBytes(last.leased)} leased, ${fmtBytes(last.scrubbing)} scrubbing, ${fmtBytes(last.free)} free` : "No samples yet",
  },
  svg("rect", { class: "trend-size", x: 0, y: 0, width: W, height: H }),
  svg("path", { class: "trend-free", d: area((s) => s.leased + s.scrubbing, (s) => s.leased + s.scrubbing + s.free) }),
  svg("path", { class: "trend-scrubbing", d: area((s) => s.leased, (s) => s.leased + s.scrubbing) }),
  svg("path", { class: "trend-leased", d: area(() => 0, (s) => s.leased) }));
  chart.append(svg("title", {}, samples.length
    ? `The last hour, ${samples.length} samples: leased (bottom), scrubbing, free; peak leased ${fmtBytes(Math.max(...samples.map((s) => s.leased)))}`
    : "No samples yet: the daemon samples every pool periodically"));
  return chart;
}
