// The memory map page: a device's claims and leases laid out by offset, coloured by tenant or host.
import { api } from "./api.js";
import { hideTooltip, showTooltip } from "./chrome.js";
import { coloursFor } from "./colours.js";
import { h } from "./dom.js";
import { ago, fmtBytes, pct } from "./format.js";
import { hostName, loadHostNames } from "./hostnames.js";
import { leaseTable } from "./lease-table.js";
import { drawDetails, leaseLines } from "./map-details.js";
import { tickNow } from "./poll.js";
import { emptyState } from "./widgets.js";

export const mapPage = {
  title: "Memory map",
  mount(root, arg) {
    const st = { id: arg ? Number(arg) : null, colourBy: "tenant", selected: null, json: "" };
    st.picker = h("select", { id: "map-device", onchange: () => { location.hash = `#/map/${st.picker.value}`; } });
    st.colour = h("select", { id: "map-colour", onchange: () => { st.colourBy = st.colour.value; st.json = ""; tickNow(); } },
      h("option", { value: "tenant" }, "tenant"), h("option", { value: "host" }, "host"));
    st.title = h("h1", {}, "Memory map");
    st.meta = h("div", { class: "muted" });
    st.body = h("div", {}, emptyState("Loading…"));
    root.append(st.title, h("div", { class: "toolbar" },
      h("label", {}, "Device", st.picker), h("label", {}, "Colour leases by", st.colour), st.meta),
    st.body);
    return st;
  },
  async refresh(st) {
    await loadHostNames();
    const devices = await api("/v1/devices");
    const ids = devices.map((d) => String(d.id)).join();
    if (st.pickerIds !== ids) {
      st.pickerIds = ids;
      st.picker.replaceChildren(...devices.map((d) => h("option", { value: d.id }, `${d.devname} (${d.pool})`)));
    }
    if (!devices.length) {
      st.body.replaceChildren(emptyState("No devices to map."));
      return;
    }
    if (st.id === null) {
      location.replace(`#/map/${devices[0].id}`);
      return;
    }
    st.picker.value = String(st.id);
    const map = await api(`/v1/devices/${st.id}/extents`);
    const json = JSON.stringify(map);
    if (json !== st.json) {
      st.json = json;
      drawMap(st, map);
    }
    drawDetails(st);
  },
};

function drawMap(st, { device, claims, leases }) {
  st.leases = new Map(leases.map((l) => [l.id, l]));
  st.title.textContent = `Memory map · ${device.devname}`;
  st.meta.textContent = `${device.chardev} · ${device.kind} · pool ${device.pool} · ${fmtBytes(device.size)}`
    + ` · align ${fmtBytes(device.align)} · ${device.state}`;
  const keyOf = (l) => (st.colourBy === "tenant" ? l.tenant ?? "(no tenant)" : l.host);
  const place = (el, offset, length) => {
    el.style.left = `${pct(offset, device.size)}%`;
    el.style.width = `${pct(length, device.size)}%`;
    return el;
  };
  const colours = coloursFor([...leases.map(keyOf), ...claims.map((c) => c.host)]);
  const colourOf = (key) => colours.get(key);
  const claimLane = h("div", { class: "lane claims" }, claims.map((c) => {
    const el = h("div", {
      class: "extent claim", "data-claim": c.id,
      onmousemove: (e) => showTooltip(e, [`Claim #${c.id} by host ${hostName(c.host)}`,
        `offset ${fmtBytes(c.offset)}, size ${fmtBytes(c.length)}`, `claimed ${ago(c.created_at)}`]),
      onmouseleave: hideTooltip,
    });
    el.style.background = colourOf(c.host);
    return place(el, c.offset, c.length);
  }));
  const leaseLane = h("div", { class: "lane leases" }, leases.map((l) => {
    const el = h("div", {
      class: `extent lease${st.selected === l.id ? " selected" : ""}${l.elastic ? " elastic" : ""}`
        + `${l.reclaim_by ? " reclaiming" : ""}`, "data-lease": l.id,
      tabindex: 0,
      onmousemove: (e) => showTooltip(e, leaseLines(l)),
      onmouseleave: hideTooltip,
      onclick: () => { st.selected = l.id; st.json = ""; drawMapFromCache(st, { device, claims, leases }); },
    });
    el.style.background = colourOf(keyOf(l));
    return place(el, l.offset, l.length);
  }));
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const el = h("span", {}, fmtBytes(Math.round(device.size * f)));
    el.style.left = `${f * 100}%`;
    return el;
  });
  const keys = [...new Set(leases.map(keyOf))].sort();
  const hosts = [...new Set(claims.map((c) => c.host))].sort();
  const leased = leases.reduce((sum, l) => sum + l.length, 0);
  const claimed = claims.reduce((sum, c) => sum + c.length, 0);
  const summary = `${leases.length} live lease${leases.length === 1 ? "" : "s"} (${fmtBytes(leased)}), `
    + `${claims.length} claim${claims.length === 1 ? "" : "s"} (${fmtBytes(claimed)}), `
    + `${fmtBytes(device.size - claimed)} unclaimed`;
  st.details = h("div", { class: "card details", id: "map-details" });
  const mapCard = h("div", { class: "map", id: "memory-map" },
    h("div", { class: "muted" }, summary),
    h("div", { class: "lane-title" }, "Claims, by host"), claimLane,
    h("div", { class: "lane-title" }, `Leases, by ${st.colourBy}`), leaseLane,
    h("div", { class: "axis" }, ticks),
    h("div", { class: "legend" },
      keys.map((k) => h("span", {}, swatch(colourOf(k)), `${st.colourBy} ${st.colourBy === "host" ? hostName(k) : k}`)),
      hosts.map((k) => h("span", {}, swatch(colourOf(k), 0.55), `claim of ${hostName(k)}`)),
      h("span", {}, h("span", { class: "swatch seg-free" }), "unclaimed")));
  const parts = [h("div", { class: "map-layout" }, mapCard, st.details)];
  if (!leases.length && !claims.length) {
    parts.unshift(emptyState(`Nothing is claimed or leased on ${device.devname}: all ${fmtBytes(device.size)} are free.`));
  }
  if (leases.length) parts.push(h("h2", {}, "Leases on this device"), leaseTable(leases, { compact: true }));
  st.body.replaceChildren(...parts);
}

function drawMapFromCache(st, map) { st.json = JSON.stringify(map); drawMap(st, map); drawDetails(st); }

function swatch(colour, opacity = 1) {
  const el = h("span", { class: "swatch" });
  el.style.background = colour;
  el.style.opacity = String(opacity);
  return el;
}
