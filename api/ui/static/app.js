// poold admin UI: one page, hash routes (#/overview, #/devices, #/map/<id>, #/leases, #/hosts,
// #/events), one polling loop that refreshes the page on screen without reloading it.
//
// Every API call carries the admin's bearer token, kept in sessionStorage (this tab only). A 401
// anywhere returns to the login page. The DOM is built with h() and textContent, never innerHTML:
// tenant names and labels are whatever clients sent.

import { ApiError, call, noSuchRoute } from "./api.js";
import { banner, hideTooltip } from "./chrome.js";
import { devicesPage } from "./devices.js";
import { $, h } from "./dom.js";
import { eventsPage } from "./events.js";
import { hostsPage } from "./hosts.js";
import { leasesPage } from "./leases.js";
import { mapPage } from "./map.js";
import { overviewPage } from "./overview.js";
import { setCurrent, startPolling, tickNow, togglePause } from "./poll.js";
import { session } from "./session.js";

// --- pages --------------------------------------------------------------------------------------
// A page: mount(root, arg) builds what stays and returns its state; refresh(state) fetches and
// redraws the data. refresh runs at once and then every POLL_MS while the page is on screen.

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
