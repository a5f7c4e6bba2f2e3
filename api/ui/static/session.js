// The admin's session: the bearer token and who it is, kept in sessionStorage (this tab only).

const KEY_TOKEN = "poold.token";
const KEY_WHO = "poold.whoami";
const KEY_NOTICE = "poold.notice";

export const session = {
  get token() { return sessionStorage.getItem(KEY_TOKEN) || ""; },
  get who() { return JSON.parse(sessionStorage.getItem(KEY_WHO) || "null"); },
  start(token, who) {
    sessionStorage.setItem(KEY_TOKEN, token);
    sessionStorage.setItem(KEY_WHO, JSON.stringify(who));
  },
  end(notice) {
    sessionStorage.removeItem(KEY_TOKEN);
    sessionStorage.removeItem(KEY_WHO);
    if (notice) sessionStorage.setItem(KEY_NOTICE, notice);
  },
  // The notice the login page shows once (why the session ended), then forgets.
  takeNotice() {
    const notice = sessionStorage.getItem(KEY_NOTICE);
    sessionStorage.removeItem(KEY_NOTICE);
    return notice;
  },
};
