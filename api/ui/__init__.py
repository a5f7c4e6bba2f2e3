"""The admin web UI: static files (vanilla JS and CSS, no build step, no CDN) served at /ui."""
