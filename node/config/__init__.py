"""runtime.toml: its model and validation, what each key means, `*_file` secrets, what a
config exposes, and SIGHUP reloads."""
