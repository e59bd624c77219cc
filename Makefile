# Attention from Scratch: the one entry point for people and CI. `make` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
# On the course's JupyterHub the instructor's course folder names the shared environment (.attention-env, written by
# make hub; or ATTENTION_ENV, which her servers and login shells set; docs/jupyterhub.md): it needs no .venv of its own,
# and cron or `ssh host make autograde` find it too.
ATTENTION_ENV ?= $(shell cat .attention-env 2> /dev/null)
ifneq ($(ATTENTION_ENV),)
ifeq ($(wildcard $(VENV)/.installed),)
VENV := $(ATTENTION_ENV)
SHARED_ENV := yes
endif
endif
BIN := $(abspath $(VENV))/bin
# nbgrader's own commands find theirs (`nbgrader db upgrade` runs `alembic`) on PATH: the venv comes first.
export PATH := $(BIN):$(PATH)
ASSIGNMENTS = $(shell $(BIN)/python -c "from attention_course.grading.course import available; print(' '.join(available()))")
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install release solutions solutions-html student-bundle demo autograde serve serve-reload feedback grades report similarity check test sweep audit bench bench-class bench-submit bench-rush lab hub hub-env doctor clean

help: ## List the targets (the default)
	@echo "Attention from Scratch: make <target>"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

ifeq ($(SHARED_ENV),yes)
install:
	@echo "This course folder runs the shared environment $(VENV) (ATTENTION_ENV or .attention-env): nothing to install. For a .venv of its own: ATTENTION_ENV= make install" >&2

$(STAMP): requirements.txt
	@echo "make: the shared environment $(VENV) is missing or older than requirements.txt: root builds it again (sudo make hub-env; docs/jupyterhub.md)" >&2; exit 1
else
install: $(STAMP) ## Create .venv with every pinned package (~3 min the first time, then instant)

$(STAMP): requirements.txt pyproject.toml tests/axe/package-lock.json tools/install_env.py
	@# whole or not at all: a failed step removes .venv and says which package on which Python (tools/install_env.py)
	@command -v $(PYTHON) > /dev/null || { echo "make install failed: $(PYTHON) not found: install Python 3.11 \
	  (Debian 12: sudo apt install python3.11-venv) or name one: make install PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) tools/install_env.py $(VENV)
endif

release: $(STAMP) ## Generate the student version of every assignment into release/ (~10 s each)
	@for a in $(ASSIGNMENTS); do nbgrader generate_assignment "$$a" --force --log-level=ERROR || exit 1; done
	@echo "Released: $(ASSIGNMENTS)"

solutions: $(STAMP) ## Generate the executed solutions into solutions/ (~15 s each)
	@for a in $(ASSIGNMENTS); do nbgrader generate_solution "$$a" --force --log-level=WARN || exit 1; done

solutions-html: solutions ## The executed solutions as pages to post after the deadline (solutions/<id>/*.html)
	$(BIN)/python -m attention_course.grading solutions-html

demo: $(STAMP) release ## Install, release, write a demo class, autograde, feedback, grade table (~3 min)
	$(BIN)/python -m tools demo
	@$(MAKE) --no-print-directory autograde feedback grades

autograde: $(STAMP) ## Autograde submitted/ in parallel, skipping unchanged hand-ins (WORKERS=n, FORCE=1, DB=url, SCHEDULER=tcp://host:8786, ACCEPT=layer,...)
	$(BIN)/python -m attention_course.grading autograde $(if $(WORKERS),--workers $(WORKERS)) \
	  $(if $(FORCE),--force) $(if $(DB),--db $(DB)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) \
	  $(if $(ACCEPT),--accept-missing $(ACCEPT))

serve: $(STAMP) ## Feedback at submit: grade each hand-in of the assignments in c.OnSubmit as it comes and release its page to the student; Ctrl-C stops (WORKERS=n, SCHEDULER=tcp://host:8786)
	$(BIN)/python -m attention_course.grading serve $(if $(WORKERS),--workers $(WORKERS)) \
	  $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(ACCEPT),--accept-missing $(ACCEPT))

serve-reload: $(STAMP) ## Have the running grading service read nbgrader_config.py (c.OnSubmit, c.Term) and extensions.csv now, and print what it took or why it kept its settings (it also notices a change of either by itself); its log: service.log
	$(BIN)/python -m attention_course.grading serve --reload

feedback: $(STAMP) ## Write HTML feedback for every autograded submission into feedback/ (~5 s)
	@for a in $(ASSIGNMENTS); do \
	  if compgen -G "autograded/*/$$a" > /dev/null; then \
	    nbgrader generate_feedback "$$a" --force --log-level=ERROR || exit 1; \
	    echo "$$a: $$(ls feedback/*/$$a/*.html 2> /dev/null | wc -l) page(s) in feedback/<student>/$$a/"; \
	  fi; done

grades: $(STAMP) ## Print the grade table; save grades.csv and grades-canvas.csv (Canvas import; refused while answers wait for grading by hand unless PROVISIONAL=1; a hand-in missing after its deadline is 0 there unless MISSING=blank) (~5 s)
	$(BIN)/python -m attention_course.grading table --csv grades.csv $(if $(PROVISIONAL),--provisional) \
	  $(if $(MISSING),--missing $(MISSING))

report: $(STAMP) ## Score histograms, per-check pass rates and the similarity of hand-ins (report/index.html) (~15 s)
	$(BIN)/python -m attention_course.grading similarity
	$(BIN)/python -m attention_course.grading report --out report

similarity: $(STAMP) ## Which hand-ins share their code: pairs ranked, side by side (report/similarity/<id>.html, .json; A=<id>) (~2 s)
	$(BIN)/python -m attention_course.grading similarity $(A)

check: $(STAMP) ## Lint (ruff) and the fast tests: no grading run, server or browser; run after every change (1 to 2 min)
	$(BIN)/ruff check attention_course tools tests deploy nbgrader_config.py $(wildcard source/*/catalogue.py)
	$(BIN)/python -m pytest -q -m "not slow"

test: $(STAMP) ## Run every test: package, release, real grading runs, hostile hand-ins, exchange, PostgreSQL, Dask, browser, in four processes on 2 cores (some wait on a server, a browser or a sleeping hand-in while others compute); the representative part of each catalogue, entries touching different cells sharing a hand-in (make sweep takes all, each alone) (~10 min; docs/testing.md)
	$(BIN)/python -m pytest -q -n 4 --no-loadscope-reorder

sweep: $(STAMP) ## The grading and Validate tests over every catalogue entry (make test takes a representative part), and every disguised copy of the similarity tests graded; run it after changing a master, a catalogue, the grader or a disguise (~23 min)
	ATTENTION_SWEEP=1 $(BIN)/python -m pytest -q -n 3 tests/test_grading.py tests/test_security.py \
	  tests/test_accessibility.py tests/test_release.py tests/test_similarity.py

audit: $(STAMP) ## Audit the pages in feedback/, report/ and solutions/ with axe-core, WCAG 2.1 AA (after demo, report, solutions-html)
	$(BIN)/python tests/tools/audit_pages.py $(wildcard feedback report solutions)

bench: $(STAMP) ## Time stock nbgrader vs the course command on 40 hand-ins of 01; a mixed class on 1, 2 and 2 Dask workers; a CPU hog beside a class of 8; the similarity report on 500 hand-ins; a deadline rush of 300 hand-ins of all seven assignments within 10 minutes (~36 min)
	$(BIN)/python -m tools bench
	$(BIN)/python -m tools bench-similarity --students 500
	$(BIN)/python -m tools bench-rush

bench-submit: $(STAMP) ## Feedback at submit under load: 60 students handing in within a minute, with local and with 2 Dask workers: latency p50 / p95 / max (~5 min)
	$(BIN)/python -m tools bench-submit

bench-rush: $(STAMP) ## A deadline rush: 300 students handing in across the seven assignments within 10 minutes, more toward the deadline, on local workers: latency p50 / p95 / max, the longest queue (~12 min)
	$(BIN)/python -m tools bench-rush

N ?= 500
bench-class: $(STAMP) ## Grade N (default 500) hand-ins of 01, seconds per 100 as it goes: flat as the gradebook grows? (~5 min)
	$(BIN)/python -m tools bench-class --students $(N)

doctor: $(STAMP) ## Which layers of the kernels' sandbox hold on this host, and how to add a missing one (~2 s)
	$(BIN)/python -m attention_course.grading doctor

student-bundle: $(STAMP) ## What students get, without source/ or the grading code: the assignments released to the exchange (or ONLY='01_self_attention ...', ONLY=all), the student package, pins, Validate settings (bundle/*.zip)
	$(BIN)/python -m attention_course.grading student-bundle $(if $(ONLY),--assignments $(ONLY))

lab: $(STAMP) ## Open JupyterLab on the course, with the nbgrader extensions (formgrader, validate)
	$(BIN)/jupyter lab --notebook-dir="$(CURDIR)" $(if $(filter 0,$(shell id -u)),--allow-root)

hub: $(STAMP) ## A class on JupyterHub on this machine for a trial: an instructor and STUDENTS (default 2) as real Unix users, made and removed; loopback PORT (8000); Ctrl-C stops it (root; docs/jupyterhub.md)
	@if [ "$(SHARED_ENV)" = yes ]; then echo "make $@ builds the shared environment from a .venv of the course's own, not from the shared one: ATTENTION_ENV= make $@" >&2; exit 1; fi
	$(BIN)/python -m attention_course.grading.deploy.trial $(if $(STUDENTS),--students $(STUDENTS)) $(if $(PORT),--port $(PORT)) \
	  $(if $(HUB_ENV),--env $(HUB_ENV))

hub-env: $(STAMP) ## Build or refresh the environment every user's server runs on JupyterHub (HUB_ENV, default /opt/attention-from-scratch/env; ~25 s the first time)
	@if [ "$(SHARED_ENV)" = yes ]; then echo "make $@ builds the shared environment from a .venv of the course's own, not from the shared one: ATTENTION_ENV= make $@" >&2; exit 1; fi
	$(BIN)/python -m attention_course.grading.deploy.trial --env-only $(if $(HUB_ENV),--env $(HUB_ENV))

clean: ## Remove generated grading files (submissions, autograded, feedback, solutions, gradebook, the course-local exchange, the grading service's queue and log); keep .venv and extensions.csv
	find submitted autograded feedback solutions -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf gradebook.db grades.csv grades-canvas.csv collect-refused.jsonl report exchange bundle .grading-service service.log service.log.1
