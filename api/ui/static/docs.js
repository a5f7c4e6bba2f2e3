// Starts Swagger UI on /docs (api/docs.py) against this daemon's own OpenAPI document. A file,
// not an inline script: the page's Content-Security-Policy allows scripts from 'self' only.
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
