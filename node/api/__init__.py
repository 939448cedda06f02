"""The API areas: one module per area declares its routes (with who may call them and what
they take and return) and calls its service; node/app.py composes them."""
