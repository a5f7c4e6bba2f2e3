// poold admin UI: one page, hash routes (#/overview, #/devices, #/map/<id>, #/leases, #/hosts,
// #/events), one polling loop that refreshes the page on screen without reloading it.
//
// Every API call carries the admin's bearer token, kept in sessionStorage (this tab only). A 401
// anywhere returns to the login page. The DOM is built with h() and textContent, never innerHTML:
// tenant names and labels are whatever clients sent.

import { ApiError, api, call, noSuchRoute } from "./api.js";
import { banner, confirmDialog, hideTooltip, toast } from "./chrome.js";
import { $, h } from "./dom.js";
import { ago, fmtBytes, fmtDuration, fmtTime, parseBytes, pct, shortId } from "./format.js";
import { leasesPage } from "./leases.js";
import { mapPage } from "./map.js";
import { overviewPage } from "./overview.js";
import { setCurrent, startPolling, tickNow, togglePause } from "./poll.js";
import { session } from "./session.js";
import { emptyState, stateBadge, table } from "./widgets.js";

// --- pages --------------------------------------------------------------------------------------
// A page: mount(root, arg) builds what stays and returns its state; refresh(state) fetches and
// redraws the data. refresh runs at once and then every POLL_MS while the page is on screen.

// Devices ---------------------------------------------------------------------------------------

const devicesPage = {
  title: "Devices",
  mount(root) {
    const st = { ledger: h("div", {}, emptyState("Loading…")), kernel: h("div", {}) };
    root.append(h("h1", {}, "Devices"), st.ledger,
      h("h2", {}, "Kernel topology (what `poold discover` sees)"), st.kernel);
    return st;
  },
  async refresh(st) {
    const [devices, topo] = await Promise.allSettled([api("/v1/devices"), api("/v1/topology")]);
    if (devices.status === "rejected") throw devices.reason;
    const topology = topo.status === "fulfilled" ? topo.value : null;
    const dax = new Map((topology?.dax_devices || []).map((d) => [baseName(d.chardev), d]));
    const byRegion = new Map((topology?.dax_regions || []).map((r) => [r.id, r]));
    st.ledger.replaceChildren(devices.value.length
      ? deviceTable(devices.value, dax, byRegion)
      : emptyState("No devices in the ledger: the daemon found no DAX device and emulation is off."));
    if (!topology) {
      st.kernel.replaceChildren(h("div", { class: "error-state" },
        `The kernel topology could not be read: ${topo.reason.message}`));
      return;
    }
    const known = new Set(devices.value.map((d) => baseName(d.chardev)));
    st.kernel.replaceChildren(...kernelTables(topology, known));
  },
};

const baseName = (path) => String(path).split("/").pop();

function topologyOf(device, dax) {
  // The emulated device has no kernel object.
  return dax.get(baseName(device.chardev)) || dax.get(device.devname) || null;
}

function leasableOf(device, t) {
  if (device.state === "missing") return [false, "missing: gone from sysfs"];
  if (device.state === "draining") return [false, "draining: no new leases"];
  if (device.kind === "emulated") return [true, "emulated file"];
  if (t && !t.leasable) return [false, t.not_leasable_because || "not leasable"];
  return [true, t ? "devdax" : ""];
}

function deviceTable(devices, dax, byRegion) {
  // Short headers, and cells that may wrap, so the table fits a laptop screen unscrolled.
  const cols = ["Device", "Pool", "Host", "State", "Mode", "NUMA", "Backing", "Size", "Leased",
    "Leasable", "Actions"].map((label) => ({ key: label, label, num: ["Size", "Leased"].includes(label),
    title: { NUMA: "NUMA node", Backing: "memdev → CXL region → DAX region" }[label] }));
  const rows = devices.map((d) => {
    const t = topologyOf(d, dax);
    const [ok, why] = leasableOf(d, t);
    const region = t && byRegion.get(t.region_id);
    const backing = t ? [t.memdevs ? t.memdevs.map((m) => `${m.memdev} (serial ${m.serial})`).join(" + ") : null,
      t.cxl_region, region ? `dax region ${region.id}` : `dax region ${t.region_id}`]
      .filter(Boolean).join(" → ") : d.kind === "emulated" ? "a file (emulated)" : "—";
    const action = !DAX_NAME.test(d.devname)
      ? h("span", { class: "muted", title: "Only dax devices are drained" }, "—")
      : d.state === "draining"
        ? h("button", { class: "small ghost undrain", onclick: () => drainAction(d, "undrain") }, "Undrain")
        : h("button", { class: "small ghost drain", disabled: d.state === "missing",
          onclick: () => drainAction(d, "drain") }, "Drain");
    return h("tr", { "data-device": d.id },
      h("td", {}, h("b", {}, d.devname), h("div", { class: "muted mono", title: d.chardev }, shortPath(d.chardev))),
      h("td", {}, d.pool), h("td", {}, d.host ?? "shared"),
      h("td", {}, stateBadge(d.state)), h("td", {}, t ? t.mode : d.kind),
      h("td", {}, d.numa_node ?? t?.numa_node ?? t?.target_node ?? "—"),
      h("td", { class: "wrap" }, backing),
      h("td", { class: "num" }, fmtBytes(d.size)),
      h("td", { class: "num" }, `${fmtBytes(d.leased_bytes)} (${pct(d.leased_bytes, d.size).toFixed(0)} %)`),
      h("td", { class: "wrap" }, stateBadge(ok ? "yes" : "no"), why ? ` ${why}` : ""),
      h("td", { class: "actions" }, action, " ", h("a", { href: `#/map/${d.id}` }, "Map")));
  });
  return table(cols, rows);
}

const shortPath = (path) => (path.length > 32 ? `…${path.slice(-30)}` : path);

// Device operations (api.routers.devices) address dax devices by name; the emulated device has
// none of them.
const DAX_NAME = /^dax\d+\.\d+$/;

async function deviceOp(devname, operation, body) {
  const path = operation === "destroy" ? `/v1/devices/${devname}`
    : operation === "create" ? "/v1/devices" : `/v1/devices/${devname}/${operation}`;
  const method = operation === "destroy" ? "DELETE" : "POST";
  try {
    const done = await api(path, { method, body });
    toast(`${done.devname}: ${operation} done.`);
  } catch (exc) {
    if (exc.status === 401) return;
    toast(exc.missingEndpoint
      ? `This daemon cannot ${operation} devices yet (${exc.where} answered ${exc.status}).`
      : `${operation} ${devname || ""} refused: ${exc.message}`, "error");
  }
  tickNow();
}

async function drainAction(device, verb) {
  const text = verb === "drain"
    ? `No new leases will be placed on ${device.devname}; its ${device.live_leases} live lease(s) run until released, expired or revoked.`
    : `${device.devname} will take new leases again.`;
  if (await confirmDialog(`${verb === "drain" ? "Drain" : "Undrain"} ${device.devname}?`, text,
    verb === "drain" ? "Drain" : "Undrain")) await deviceOp(device.devname, verb);
}

async function reconfigureAction(d) {
  const devname = d.chardev.split("/").pop();
  const mode = d.mode === "system-ram" ? "devdax" : "system-ram";
  const text = mode === "system-ram"
    ? `${devname} goes to the kernel as a CPU-less NUMA node (kmem); poold stops leasing it. Refused while it holds live leases.`
    : `${devname} leaves the page allocator and becomes a leasable devdax device. Refused while its memory is in use.`;
  if (await confirmDialog(`Reconfigure ${devname} as ${mode}?`, text, "Reconfigure")) {
    await deviceOp(devname, "reconfigure", { mode });
  }
}

async function resizeAction(d) {
  const devname = d.chardev.split("/").pop();
  const text = await confirmDialog(`Resize ${devname}`, `Now ${fmtBytes(d.size)}; a multiple of `
    + `${fmtBytes(d.align)}. Refused while it holds live leases.`, "Resize", "e.g. 1GiB, 0 to empty");
  if (text === null) return;
  const size = parseBytes(text);
  if (Number.isNaN(size)) { toast(`Not a size: ${text}`, "error"); return; }
  await deviceOp(devname, "resize", { size });
}

async function destroyAction(d) {
  const devname = d.chardev.split("/").pop();
  if (await confirmDialog(`Destroy ${devname}?`, `${fmtBytes(d.size)} go back to dax region `
    + `${d.region_id}. Refused while it holds live leases.`, "Destroy")) await deviceOp(devname, "destroy");
}

async function createAction(region) {
  const text = await confirmDialog(`New device in dax region ${region.id}`,
    `${fmtBytes(region.available_size)} available; a multiple of ${fmtBytes(region.align)}.`,
    "Create", "e.g. 1GiB");
  if (text === null) return;
  const size = parseBytes(text);
  if (Number.isNaN(size)) { toast(`Not a size: ${text}`, "error"); return; }
  await deviceOp("", "create", { region: region.id, size });
}

function kernelTables(topo, known) {
  const out = [];
  const daxRows = (topo.dax_devices || []).map((d) => h("tr", { "data-dax": baseName(d.chardev) },
    h("td", {}, d.chardev), h("td", {}, String(d.region_id)), h("td", {}, d.nd_region ?? "—"),
    h("td", {}, d.cxl_region ?? "—"),
    h("td", {}, d.memdevs ? d.memdevs.map((m) => m.memdev).join(", ") : "—"),
    h("td", {}, d.numa_node ?? "—"), h("td", {}, d.target_node ?? "—"), h("td", {}, d.mode ?? "—"),
    h("td", {}, d.state ?? "—"), h("td", { class: "num" }, fmtBytes(d.size)),
    h("td", { class: "wrap" }, stateBadge(d.leasable ? "yes" : "no"),
      d.leasable ? "" : ` ${d.not_leasable_because}`),
    h("td", {}, known.has(baseName(d.chardev)) ? "yes" : "no"),
    h("td", { class: "actions" }, h("button", { class: "small ghost reconfigure", onclick: () => reconfigureAction(d) },
      d.mode === "system-ram" ? "To devdax" : "To system-ram"), " ",
    h("button", { class: "small ghost resize", onclick: () => resizeAction(d) }, "Resize"), " ",
    h("button", { class: "small ghost destroy", onclick: () => destroyAction(d) }, "Destroy"))));
  out.push(h("h2", {}, "DAX devices"), daxRows.length
    ? table(["DAX device", "DAX region", "nd region", "CXL region", "Memdevs", "NUMA",
      "Target node", "Mode", "State", "Size", "Leasable", "In ledger", "Actions"]
      .map((label) => ({ key: label, label, num: label === "Size", title: label === "NUMA" ? "NUMA node" : null })), daxRows)
    : emptyState("The kernel shows no DAX device."));
  const regionRowsDax = (topo.dax_regions || []).map((r) => h("tr", { "data-dax-region": r.id },
    h("td", {}, `region${r.id}`), h("td", { class: "mono" }, r.path),
    h("td", { class: "num" }, fmtBytes(r.size)), h("td", { class: "num" }, fmtBytes(r.available_size)),
    h("td", {}, fmtBytes(r.align)), h("td", {}, r.dynamic ? "dynamic" : "static"),
    h("td", {}, (r.devices || []).map((c) => c.split("/").pop()).join(", ") || "—"),
    h("td", {}, r.dynamic && r.available_size > 0
      ? h("button", { class: "small ghost create", onclick: () => createAction(r) }, "New device") : "")));
  if (regionRowsDax.length) {
    out.push(h("h2", {}, "DAX regions"), table(["DAX region", "Path", "Size", "Available", "Align",
      "Kind", "Devices", "Actions"].map((label) => ({ key: label, label, num: ["Size", "Available"].includes(label) })),
    regionRowsDax));
  }
  const memdevRows = (topo.memdevs || []).map((m) => h("tr", {},
    h("td", {}, m.memdev), h("td", {}, m.serial ?? "—"), h("td", {}, m.host ?? "—"),
    h("td", { class: "num" }, fmtBytes(m.ram_size)), h("td", { class: "num" }, fmtBytes(m.pmem_size)),
    h("td", {}, m.numa_node ?? "—"), h("td", {}, m.firmware_version ?? "—")));
  out.push(h("h2", {}, "CXL memdevs"), memdevRows.length
    ? table(["Memdev", "Serial", "Host", "RAM", "PMEM", "NUMA node", "Firmware"]
      .map((label) => ({ key: label, label, num: ["RAM", "PMEM"].includes(label) })), memdevRows)
    : emptyState("No CXL memory devices."));
  const regionRows = (topo.regions || []).map((r) => h("tr", {},
    h("td", {}, r.region), h("td", {}, r.type ?? "—"), h("td", { class: "num" }, fmtBytes(r.size)),
    h("td", {}, r.interleave_ways ?? "—"), h("td", {}, r.decode_state ?? "—"),
    h("td", {}, (r.mappings || []).map((m) => m.memdev).join(", ") || "—")));
  if (regionRows.length) {
    out.push(h("h2", {}, "CXL regions"), table(["Region", "Type", "Size", "Interleave ways",
      "Decode state", "Memdevs"].map((label) => ({ key: label, label, num: label === "Size" })), regionRows));
  }
  const nodeRows = (topo.numa_nodes || []).map((n) => h("tr", {},
    h("td", {}, `node${n.node}`), h("td", {}, n.has_cpu ? n.cpulist || "yes" : "CPU-less"),
    h("td", { class: "num" }, fmtBytes(n.mem_total)), h("td", { class: "num" }, fmtBytes(n.mem_free)),
    h("td", {}, n.memory_tier ?? "—")));
  if (nodeRows.length) {
    out.push(h("h2", {}, "NUMA nodes"), table(["Node", "CPUs", "Memory", "Free", "Memory tier"]
      .map((label) => ({ key: label, label, num: ["Memory", "Free"].includes(label) })), nodeRows));
  }
  return out;
}

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
