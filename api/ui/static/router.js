// The hash router: shows the page #/<name>/<arg> names, with the header's user and active link.
import { banner, hideTooltip } from "./chrome.js";
import { devicesPage } from "./devices.js";
import { $, h } from "./dom.js";
import { eventsPage } from "./events.js";
import { hostsPage } from "./hosts.js";
import { leasesPage } from "./leases.js";
import { showLogin } from "./login.js";
import { mapPage } from "./map.js";
import { overviewPage } from "./overview.js";
import { poolsPage } from "./pools.js";
import { setCurrent, tickNow } from "./poll.js";
import { session } from "./session.js";
import { tenantsPage } from "./tenants.js";
import { tokensPage } from "./tokens.js";

// A page: mount(root, arg) builds what stays and returns its state; refresh(state) fetches and
// redraws the data. refresh runs at once and then every POLL_MS while the page is on screen.
const PAGES = {
  overview: overviewPage, pools: poolsPage, devices: devicesPage, map: mapPage,
  leases: leasesPage, hosts: hostsPage, tenants: tenantsPage, tokens: tokensPage,
  events: eventsPage,
};

export function route() {
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
