"""The quantum text analyzer: six surface statistics of a text, encoded on a PennyLane circuit, read back as
a "coherence" in [0, 1].

The statistics (each scaled to about [0, 1], then to an angle in [0, pi]) are the length (up to 200
characters), the word count (per 100), the share of distinct characters (per 26 letters), the mean word
length (per 15), and the shares of punctuation (``.,!?;:``) and of capitals. Feature ``i`` rotates wire ``i``
with ``RY`` (wires beyond the sixth stay in ``|0>``); a CNOT chain, a ring closure and CNOTs between every
other wire entangle them; the readout is ``<Z>`` of every wire and the coherence their variance ``v`` as
``v / (v + 0.1)``. It is a deterministic function of those statistics, with no access to the text's meaning.
"""

from __future__ import annotations

import math
from functools import lru_cache

FEATURES = 6
PUNCTUATION = ".,!?;:"


def text_features(text: str) -> list[float]:
    """The six statistics of ``text`` as rotation angles (see the module docstring)."""
    words = text.split()
    return [
        math.pi * value
        for value in (
            min(len(text), 200) / 200.0,
            len(words) / 100.0,
            len(set(text.lower())) / 26.0,
            (sum(len(w) for w in words) / len(words) / 15.0) if words else 0.0,
            sum(c in PUNCTUATION for c in text) / max(len(text), 1),
            sum(c.isupper() for c in text) / max(len(text), 1),
        )
    ]


@lru_cache(maxsize=8)
def analysis_circuit(n_qubits: int):
    """The PennyLane QNode on ``n_qubits`` wires (``default.qubit``) mapping angles to ``<Z>`` per wire."""
    import pennylane as qml

    if n_qubits < 2:
        raise ValueError("the analysis circuit needs at least 2 qubits")
    device = qml.device("default.qubit", wires=n_qubits)

    @qml.qnode(device)
    def circuit(angles):
        for wire, angle in enumerate(angles[:n_qubits]):
            qml.RY(angle, wires=wire)
        for wire in range(n_qubits - 1):
            qml.CNOT(wires=[wire, wire + 1])
        qml.CNOT(wires=[n_qubits - 1, 0])
        for wire in range(0, n_qubits - 2, 2):
            qml.CNOT(wires=[wire, wire + 2])
        return [qml.expval(qml.PauliZ(wire)) for wire in range(n_qubits)]

    return circuit


def quantum_coherence(text: str, n_qubits: int = 8) -> float:
    """The coherence of ``text`` on an ``n_qubits``-wire circuit, in [0, 1]."""
    readout = [float(value) for value in analysis_circuit(n_qubits)(text_features(text))]
    mean = sum(readout) / len(readout)
    variance = sum((value - mean) ** 2 for value in readout) / len(readout)
    return min(1.0, max(0.0, variance / (variance + 0.1)))
