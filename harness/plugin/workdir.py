"""Where an attempt of a case runs: a directory of its own under pytest's base temporary directory."""

from __future__ import annotations

import os
import re

from harness.core.caseid import case_identity


class WorkingDirectory:
    """An attempt runs in a directory of its own under pytest's base temporary directory (kept for
    pytest's last three runs), so that what a case writes (`lightning_logs/`, a `torch.save` to a
    relative path) never lands in the checkout. `kept`: where, when the case left something there;
    an empty one is removed."""

    def __init__(self, item):
        name = re.sub(r"\W+", "_", case_identity(item)["case"])[:60]
        self.path = item.config._tmp_path_factory.mktemp(f"case-{name}-", numbered=True)
        self.kept = None

    def __enter__(self):
        self.before = os.getcwd()
        os.chdir(self.path)
        return self

    def __exit__(self, *exc_info):
        os.chdir(self.before)
        try:
            if any(self.path.iterdir()):
                self.kept = self.path
            else:
                self.path.rmdir()
        except FileNotFoundError:  # the case removed it
            pass
        except OSError:  # the case made it unreadable: it left something
            self.kept = self.path
