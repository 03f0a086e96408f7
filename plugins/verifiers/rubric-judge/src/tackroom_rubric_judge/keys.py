"""Round-robin over API keys, dropping the ones the provider rejects."""

from __future__ import annotations

from dataclasses import dataclass, field

from tackroom_rubric_judge.errors import JudgeAuthError


@dataclass
class KeyPool:
    """Hands out keys in turn; shared by every trial that talks to one judge endpoint.

    Keys are never logged: stats and errors name them ``key#0``, ``key#1`` …
    A pool without keys hands out ``None`` (no ``Authorization`` header).
    """

    keys: list[str]
    _next: int = 0
    disabled: dict[int, str] = field(default_factory=dict)
    """Index → why the key was dropped."""

    def take(self) -> tuple[int, str | None]:
        """The next usable key and its index; raises :class:`JudgeAuthError` when all were rejected."""
        if not self.keys:
            return -1, None
        for _ in range(len(self.keys)):
            index = self._next
            self._next = (self._next + 1) % len(self.keys)
            if index not in self.disabled:
                return index, self.keys[index]
        reasons = "; ".join(f"key#{i}: {why}" for i, why in sorted(self.disabled.items()))
        raise JudgeAuthError(
            f"every judge API key was rejected ({reasons}). Check the keys in api_keys / the variables named in "
            "api_key_env, and that they may use this model"
        )

    def disable(self, index: int, reason: str) -> None:
        if index >= 0:
            self.disabled[index] = reason

    @property
    def usable(self) -> int:
        return len(self.keys) - len(self.disabled) if self.keys else 1

    @staticmethod
    def label(index: int) -> str:
        return "no-key" if index < 0 else f"key#{index}"
