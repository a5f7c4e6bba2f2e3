// Entry point of the admin UI: wires the header's buttons, the router and the polling loop.
//
// poold admin UI: one page, hash routes (#/overview, #/devices, #/map/<id>, #/leases, #/hosts,
// #/events), one polling loop that refreshes the page on screen without reloading it. Every API
// call carries the admin's bearer token, kept in sessionStorage (this tab only); a 401 anywhere
// returns to the login page.
import { $ } from "./dom.js";
import { startPolling, togglePause } from "./poll.js";
import { route } from "./router.js";
import { session } from "./session.js";

$("#pause").addEventListener("click", togglePause);
$("#logout").addEventListener("click", () => {
  session.end("You are logged out.");
  location.hash = "#/login";
});
window.addEventListener("hashchange", route);
startPolling();
route();
