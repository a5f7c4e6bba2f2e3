// Talking to the daemon: call() and api() carry the admin's token; ApiError is the API's error shape.
import { noteServerDate } from "./clock.js";
import { session } from "./session.js";

const API = location.pathname.replace(/\/ui(\/.*)?$/, "");

// The router's own 404 (no such route: `NotFound`, or FastAPI's bare body) or 405.
export function noSuchRoute(status, body) {
  const error = body && body.error;
  return status === 405 || (status === 404 && (!error || error === "NotFound"));
}

export class ApiError extends Error {
  constructor(status, body, method, path) {
    super(ApiError.describe(status, body));
    this.status = status;
    this.body = body;
    this.where = `${method} ${path}`;
  }

  static describe(status, body) {
    if (status === 0) return body.detail;
    const name = body && body.error ? body.error : `HTTP ${status}`;
    let detail = body ? body.detail : "";
    if (Array.isArray(detail)) detail = detail.map((d) => d.msg || JSON.stringify(d)).join("; ");
    else if (detail && typeof detail === "object") detail = JSON.stringify(detail);
    return detail ? `${name}: ${detail}` : name;
  }

  // A route the daemon does not have (yet), as opposed to a poold error such as UnknownDevice.
  get missingEndpoint() { return noSuchRoute(this.status, this.body); }
}

export async function call(path, { method = "GET", body, token = session.token } = {}) {
  const headers = { accept: "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let resp;
  const sentAt = Date.now();
  try {
    resp = await fetch(API + path, {
      method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (exc) {
    throw new ApiError(0, { detail: `the daemon did not answer (${exc.message})` }, method, path);
  }
  noteServerDate(Date.parse(resp.headers.get("date") || ""), sentAt, Date.now());
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text.slice(0, 300) }; }
  return { status: resp.status, data, method, path };
}

// The call every page makes: JSON on success; a 401 ends the session.
export async function api(path, options) {
  const r = await call(path, options);
  if (r.status >= 200 && r.status < 300) return r.data;
  const error = new ApiError(r.status, r.data, r.method, r.path);
  if (r.status === 401) {
    session.end(`The daemon refused your token (${error.message}). Log in again.`);
    location.hash = "#/login";
  }
  throw error;
}
