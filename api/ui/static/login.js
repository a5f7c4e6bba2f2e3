// The login page: asks for the admin token and checks it before the session starts.
import { ApiError, call, noSuchRoute } from "./api.js";
import { banner } from "./chrome.js";
import { $, h } from "./dom.js";
import { session } from "./session.js";

export function showLogin() {
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
