// Live updates: the polling loop that refreshes the page on screen, the live indicator, Pause.
import { banner } from "./chrome.js";
import { $, h } from "./dom.js";

const POLL_MS = 1000;
let current = null; // {name, page, state, loaded, busy}
let paused = false;

// route() sets the page on screen; null while the login page shows.
export function setCurrent(page) { current = page; }

export async function tickNow() {
  const mine = current;
  if (!mine || mine.busy) return;
  mine.busy = true;
  try {
    await mine.page.refresh(mine.state);
    if (mine !== current) return;
    mine.loaded = new Date().toLocaleTimeString([], { hour12: false });
    banner(null);
    setLive(paused ? "paused" : "ok", `updated ${mine.loaded}`);
  } catch (exc) {
    if (mine !== current || exc.status === 401) return;
    setLive("error", exc.message);
    const body = mine.state.body || mine.state.pools || mine.state.ledger;
    const retry = `retrying every ${POLL_MS / 1000} s`;
    if (!mine.loaded && body) {
      body.replaceChildren(h("div", { class: "error-state" },
        `Could not load this page: ${exc.message}. It loads by itself once the daemon answers; ${retry}.`));
    } else {
      banner(`Live update failed: ${exc.message}. Showing what was loaded at ${mine.loaded}; ${retry}.`);
    }
  } finally {
    mine.busy = false;
  }
}

function setLive(kind, detail) {
  const el = $("#live");
  el.className = `live ${kind}`;
  el.textContent = { ok: "live", paused: "paused", error: "offline" }[kind];
  el.title = detail || "";
}

// The Pause button: stops the live updates, or resumes them with a refresh at once.
export function togglePause() {
  paused = !paused;
  $("#pause").textContent = paused ? "Resume" : "Pause";
  setLive(paused ? "paused" : "ok");
  if (!paused) tickNow();
}

export function startPolling() {
  setInterval(() => { if (!paused && !document.hidden) tickNow(); }, POLL_MS);
}
