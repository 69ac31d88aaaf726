# The two front-door commands (see README): `make demo` and `make test`.
# Both create the virtual environment on first use; torch is installed first from the
# pinned CPU wheel so that no dependency can pull a CUDA build.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# PIP_TORCH_INDEX: where torch comes from when this machine has no local wheel (CI runners:
# https://download.pytorch.org/whl/cpu, else PyPI's CUDA build is several GB).
PIP_TORCH_INDEX ?=
# The base of `make pr-diff`: the pull request's target branch in CI, HEAD here.
BASE ?= HEAD

.PHONY: setup demo test lint check security browser image-tools pr-diff images
setup: $(STAMP)

# requirements.lock (tools/lock.sh) pins every other distribution, as the images do.
# .venv-raydash: Ray's dashboard extras (ray[default]) for the local Ray heads of the job API
# tests only (testing/ray.py, ray_head); in .venv they would load into every Ray of the suite.
$(STAMP): pyproject.toml requirements.lock requirements-raydash.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0 $(if $(PIP_TORCH_INDEX),--index-url $(PIP_TORCH_INDEX))
	$(BIN)/pip install -q -c requirements.lock -e '.[dev]'
	$(BIN)/pip install -q --no-deps --upgrade --target .venv-raydash -r requirements-raydash.txt
	touch $(STAMP)

# Each demo run gets its own name, so it trains from step 0 and keeps earlier checkpoints.
# ARGS adds overrides, e.g. ARGS='telemetry.inject_delay={rank:1,seconds:0.05}' (no spaces).
demo: setup
	$(BIN)/gkr run --local examples/train/tiny.yaml run.name=tiny-$$(date +%Y%m%d-%H%M%S) $(ARGS)

# Style, the layer contracts (pyproject.toml [tool.importlinter]), the type checker, the
# pull-request pipeline's workflows (actionlint) and the image definitions (hadolint).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/actionlint -color=false
	$(BIN)/hadolint platform/images/Containerfile

# What CI gates on besides the tests: the committed tree is rendered and valid.
check: setup
	$(BIN)/gkr render --check
	$(BIN)/gkr validate
	$(BIN)/gkr platform check

# checkov runs in its own venv (.venv-checkov): its pins conflict with ray and kubernetes.
security: setup
	tools/checkov.sh

# The gkr-ui test drives Debian's chromium through Playwright (whose own browser download
# needs the internet): installed here when missing and we are root, else say how.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	else \
		echo "chromium is missing: 'sudo apt-get install -y chromium' (the gkr-ui browser test skips without it)"; \
	fi

# The image tests (tests/test_images.py) build with buildah, push to Debian's docker-registry
# on 127.0.0.1 and inspect with skopeo: installed here when missing and we are root.
IMAGE_TOOLS := buildah skopeo docker-registry
image-tools:
	@missing=""; for tool in $(IMAGE_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(IMAGE_TOOLS); \
	else \
		echo "missing:$$missing ('sudo apt-get install -y $(IMAGE_TOOLS)'; the image tests skip without them)"; \
	fi

# Build, push and pin the platform's images (the main-branch workflow runs it): REGISTRY is
# HOST[:PORT][/PATH], empty for the catalog's own repositories.
IMAGES ?= gkr-runtime data-curation trainer trainer-nightly devbox
REGISTRY ?=
images: setup
	$(BIN)/gkr images build $(IMAGES) $(if $(REGISTRY),--registry $(REGISTRY))

# Parallel test processes (pytest-xdist): much of the suite waits on Ray, Temporal and
# subprocesses; --dist loadfile keeps a module on one process, so its module fixtures run
# once. Each process holds a Ray session: 4 of them on 2 cores timed tests out (load ~40),
# so 2. TEST_WORKERS=0 runs the suite in one process. --no-loadscope-reorder keeps the
# conftest's order (longest modules first, tests/durations.json): xdist's default reorders
# modules by test count, which left a long module trailing alone at the end.
TEST_WORKERS ?= 2
test: lint check security browser image-tools pr-diff
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The pull request's comment (.github/workflows/pull-request.yml): what the change does to
# the manifests Argo CD applies, against BASE, as Markdown. `make test` builds it against HEAD.
pr-diff: setup
	@tools/pr-diff.sh "$(BASE)"
