"""The operator console: static files served at /console/ (no build step, no CDN)."""
