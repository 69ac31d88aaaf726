"""gkr-ui (seed §8.1): a local web page over the telemetry store, for `gkr ui`.

`data` reads what the pages show from the store (its SQL is `../sql/ui_*.sql`), `live` asks the
Kubernetes API and Warden what is happening now, and `server` serves both as JSON beside one
static page (`static/`) that draws its charts itself: nothing is fetched from elsewhere, so it
works on offline machines and consoles.
"""

DEFAULT_PORT = 8470  # not Ray dashboard's 8265; light here, so `gkr --help` can show it
