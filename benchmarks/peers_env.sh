#!/usr/bin/env bash
# A Python with PyTorch's CPU build and bayesian-torch, for benchmarks/bench_peers.py, in
# .venv-peers beside the project's own .venv (which never gets PyTorch). PyTorch comes from
# a local CPU wheel only: the package registry's torch is a CUDA build of several GB.
#
#   bash benchmarks/peers_env.sh [path/to/torch-X+cpu-cp311-...whl]
#
# Without a path it looks for a torch-*+cpu-cp311-* wheel in $PIP_FIND_LINKS and /opt/wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="${1:-}"
if [ -z "$wheel" ]; then
  for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
    found=$(ls "$dir"/torch-*+cpu-cp311-*.whl 2>/dev/null | sort -V | tail -1 || true)
    if [ -n "$found" ]; then wheel="$found"; break; fi
  done
fi
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
  echo "peers_env.sh: no local CPU wheel of torch for Python 3.11 found; give its path" >&2
  exit 2
fi
case "$(basename "$wheel")" in
  torch-*+cpu-*) ;;
  *) echo "peers_env.sh: $wheel is not PyTorch's CPU build" >&2; exit 2 ;;
esac
python="$(command -v python3.11 || command -v python3)"
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "peers_env.sh: needs Python 3.11 (the wheel is cp311); $python is not" >&2
  exit 2
fi
"$python" -m venv .venv-peers
# torch's own requirements first, then torch and bayesian-torch without theirs (bayesian-torch
# asks for torchvision, tensorboard and scikit-learn, which its layers do not import).
.venv-peers/bin/pip install --quiet 'numpy<2' filelock 'typing-extensions>=4.10' \
  'sympy>=1.13.3' 'networkx>=2.5.1' jinja2 'fsspec>=0.8.5' setuptools
.venv-peers/bin/pip install --quiet --no-deps "$wheel" bayesian-torch==0.5.0
.venv-peers/bin/python -c "
import torch, bayesian_torch.layers
assert torch.version.cuda is None, 'a CUDA build of torch'
print('torch', torch.__version__, '(CPU build) and bayesian-torch in .venv-peers')"
