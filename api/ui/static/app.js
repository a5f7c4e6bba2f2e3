// poold admin UI: one page, hash routes (#/overview, #/devices, #/map/<id>, #/leases, #/hosts,
// #/events), one polling loop that refreshes the page on screen without reloading it.
//
// Every API call carries the admin's bearer token, kept in sessionStorage (this tab only). A 401
// anywhere returns to the login page. The DOM is built with h() and textContent, never innerHTML:
// tenant names and labels are whatever clients sent.

import { ApiError, api, call, noSuchRoute } from "./api.js";
import { banner, hideTooltip } from "./chrome.js";
import { devicesPage } from "./devices.js";
import { $, h } from "./dom.js";
import { ago, fmtBytes, fmtDuration, fmtTime, shortId } from "./format.js";
import { leasesPage } from "./leases.js";
import { mapPage } from "./map.js";
import { overviewPage } from "./overview.js";
import { setCurrent, startPolling, tickNow, togglePause } from "./poll.js";
import { session } from "./session.js";
import { emptyState, stateBadge, table } from "./widgets.js";

// --- pages --------------------------------------------------------------------------------------
// A page: mount(root, arg) builds what stays and returns its state; refresh(state) fetches and
// redraws the data. refresh runs at once and then every POLL_MS while the page is on screen.

// Hosts -----------------------------------------------------------------------------------------

const hostsPage = {
  title: "Hosts",
  mount(root) {
    const st = { body: h("div", { id: "hosts" }, emptyState("Loading…")) };
    root.append(h("h1", {}, "Hosts"), st.body);
    return st;
  },
  async refresh(st) {
    const hosts = await api("/v1/hosts");
    if (!hosts.length) {
      st.body.replaceChildren(emptyState("No hosts have registered."));
      return;
    }
    const cols = ["Host", "State", "Heartbeat", "Registered", "Claims", "Claimed", "Leases",
      "Leased", "Memory used", "Available", "Swap used", "NUMA nodes"].map((label) => ({
      key: label, label,
      num: ["Claims", "Claimed", "Leases", "Leased", "Memory used", "Available", "Swap used"].includes(label),
    }));
    const rows = hosts.map((x) => {
      const m = x.memory;
      const age = h("td", { class: x.heartbeat_age_s > 15 ? "state-late" : "" }, `${fmtDuration(x.heartbeat_age_s)} ago`);
      if (x.heartbeat_age_s > 15) age.style.color = "var(--warn)";
      return h("tr", { "data-host": x.id },
        h("td", {}, h("b", {}, x.name), h("div", { class: "muted mono" }, x.id)),
        h("td", {}, stateBadge(x.state)), age,
        h("td", { title: fmtTime(x.registered_at) }, ago(x.registered_at)),
        h("td", { class: "num" }, String(x.claims)), h("td", { class: "num" }, fmtBytes(x.claimed_bytes)),
        h("td", { class: "num" }, String(x.live_leases)), h("td", { class: "num" }, fmtBytes(x.leased_bytes)),
        h("td", { class: "num" }, m ? `${fmtBytes(m.used)} of ${fmtBytes(m.total)}` : "—"),
        h("td", { class: "num" }, m ? fmtBytes(m.available) : "—"),
        h("td", { class: "num" }, m ? `${fmtBytes(m.swap_used)} of ${fmtBytes(m.swap_total)}` : "—"),
        h("td", { class: "wrap" }, x.numa_nodes
          ? x.numa_nodes.map((n) => h("div", {}, `node${n.node}: ${fmtBytes(n.mem_free)} free of `
            + `${fmtBytes(n.mem_total)}${n.has_cpu ? "" : " (CPU-less)"}`))
          : h("span", { class: "muted", title: "Only the host serving this page measures its memory" }, "not this host")));
    });
    st.body.replaceChildren(table(cols, rows),
      h("p", { class: "muted" }, "Memory figures are measured by the host that serves this page; other hosts show their ledger figures only."));
  },
};

// Events ----------------------------------------------------------------------------------------

const eventsPage = {
  title: "Events",
  mount(root) {
    const st = { events: [], newest: null, kind: "" };
    const input = h("input", { id: "filter-kind", type: "search", placeholder: "e.g. lease. or device.changed",
      oninput: () => { st.kind = input.value.trim(); drawEvents(st, new Set()); } });
    st.count = h("span", { class: "count" });
    st.body = h("div", { id: "events" }, emptyState("Loading…"));
    root.append(h("h1", {}, "Events"), h("div", { class: "toolbar" }, h("label", {}, "Kind", input),
      h("span", { class: "muted" }, "The audit log, newest first, live."), st.count), st.body);
    return st;
  },
  async refresh(st) {
    const fresh = st.newest === null
      ? await api("/v1/events?limit=300")
      : await api(`/v1/events?limit=1000&after_id=${st.newest}`);
    if (st.newest !== null && !fresh.length) return;
    const ids = new Set(st.newest === null ? [] : fresh.map((e) => e.id));
    st.events = [...fresh, ...st.events].slice(0, 2000);
    st.newest = st.events.length ? st.events[0].id : 0;
    drawEvents(st, ids);
  },
};

function drawEvents(st, freshIds) {
  const shown = st.events.filter((e) => !st.kind || e.kind.startsWith(st.kind) || e.kind.includes(st.kind));
  st.count.textContent = `${shown.length} shown`;
  if (!shown.length) {
    st.body.replaceChildren(emptyState(st.events.length ? "No event matches this kind." : "No events yet."));
    return;
  }
  const cols = ["#", "Time", "Kind", "Actor", "Host", "Device", "Lease", "Details"]
    .map((label) => ({ key: label, label, num: label === "#" }));
  const rows = shown.map((e) => h("tr", { "data-event": e.id, class: freshIds.has(e.id) ? "fresh" : null },
    h("td", { class: "num" }, String(e.id)), h("td", { title: ago(e.at) }, fmtTime(e.at)),
    h("td", {}, h("span", { class: `state ${e.kind.split(".")[1] || ""}` }, e.kind)),
    h("td", {}, e.actor), h("td", {}, e.host ?? "—"),
    h("td", {}, e.device_id ? h("a", { href: `#/map/${e.device_id}` }, String(e.device_id)) : "—"),
    h("td", { class: "mono", title: e.lease_id || "" }, e.lease_id ? shortId(e.lease_id) : "—"),
    h("td", { class: "wrap mono" }, Object.entries(e.details || {})
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" "))));
  st.body.replaceChildren(table(cols, rows));
}

// --- login --------------------------------------------------------------------------------------

function showLogin() {
  $("#top").hidden = true;
  banner(null);
  const notice = session.takeNotice();
  const token = h("input", { id: "token", type: "password", autocomplete: "off", spellcheck: "false",
    placeholder: "pd_…", "aria-label": "Admin token" });
  const message = h("div", { id: "login-message", class: notice ? "message error" : "message", role: "alert" },
    notice || "");
  message.hidden = !notice;
  const submit = h("button", { id: "login-submit", type: "submit" }, "Log in");
  const form = h("form", {
    onsubmit: async (e) => {
      e.preventDefault();
      submit.disabled = true;
      const problem = await logIn(token.value.trim());
      submit.disabled = false;
      if (problem) {
        message.hidden = false;
        message.className = "message error";
        message.textContent = problem;
      }
    },
  }, h("label", { for: "token" }, "Admin token"), token, submit);
  $("#main").replaceChildren(h("div", { class: "login card" },
    h("h1", {}, "poold administration"), form, message,
    h("p", { class: "muted" }, "The daemon writes the admin token to ", h("code", {}, "<state_dir>/admin.token"),
      " when it first starts. The token stays in this browser tab (session storage) and is sent as a"
      + " bearer token with every request; closing the tab forgets it.")));
  token.focus();
}

// Checks a token with GET /v1/auth/whoami; on success starts the session and shows the overview.
// Returns what went wrong, for the login page to say.
async function logIn(token) {
  const r = await call("/v1/auth/whoami", { token });
  if (r.status === 200 && r.data) {
    if (r.data.role !== "admin") {
      return `Refused: this token is ${r.data.role} "${r.data.name}"; the admin UI needs an admin token.`;
    }
    session.start(token, { name: r.data.name, role: r.data.role, tenant: r.data.tenant, auth: true });
  } else if (noSuchRoute(r.status, r.data)) {
    // The daemon predates token auth: everyone is an admin there, the token is not checked.
    session.start(token, { name: "open", role: "admin", auth: false });
  } else if (r.status === 401) {
    return token
      ? "The daemon refused this token (401 Unauthenticated). Paste the whole content of admin.token."
      : "Paste the admin token.";
  } else if (r.status === 403) {
    return `Refused: ${ApiError.describe(r.status, r.data)}`;
  } else if (r.status === 0) {
    return `Cannot reach the daemon: ${r.data.detail}`;
  } else {
    return `The daemon answered ${ApiError.describe(r.status, r.data)}`;
  }
  location.hash = "#/overview";
  return null;
}

// --- routing and live updates -------------------------------------------------------------------

const PAGES = {
  overview: overviewPage, devices: devicesPage, map: mapPage, leases: leasesPage,
  hosts: hostsPage, events: eventsPage,
};

function route() {
  hideTooltip();
  const [name, arg] = location.hash.replace(/^#\/?/, "").split("/");
  if (name === "login" || !session.who) {
    setCurrent(null);
    if (name !== "login") { location.replace("#/login"); return; }
    showLogin();
    return;
  }
  const page = PAGES[name];
  if (!page) { location.replace("#/overview"); return; }
  const who = session.who;
  $("#top").hidden = false;
  $("#whoami").replaceChildren(`${who.role}:${who.name}`,
    who.auth ? "" : h("span", { class: "badge-auth", title: "This daemon does not check tokens (no /v1/auth/whoami)" }, " auth off"));
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === name);
  document.title = `${page.title} · poold`;
  banner(null);
  const root = h("section", { id: `page-${name}` });
  $("#main").replaceChildren(root);
  setCurrent({ name, page, state: page.mount(root, arg), loaded: false, busy: false });
  tickNow();
}

$("#pause").addEventListener("click", togglePause);
$("#logout").addEventListener("click", () => {
  session.end("You are logged out.");
  location.hash = "#/login";
});
window.addEventListener("hashchange", route);
startPolling();
route();
