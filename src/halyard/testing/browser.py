"""Headless Chromium over WebDriver (selenium), for tests and demos of the web dashboard.

Uses the system's browser and the chromedriver of the same build (Debian's ``chromium``
and ``chromium-driver``; ``.ci/test``, the README's test command, installs them), never a downloaded one: the flags
keep Chromium off the network except for the pages it is sent to.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def browser_missing() -> str | None:
    """Why no browser can be started here, or None."""
    if os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK):
        return None
    return (f"no browser: {CHROMIUM} and {CHROMEDRIVER} are needed "
            "(apt-get install chromium chromium-driver; .ci/test, the README's test command, installs them)")


def headless_chromium(width: int = 1440, height: int = 1250) -> Any:
    """A selenium Chrome driver on a fresh profile, collecting the browser's console log; quit() it when done."""
    if (why := browser_missing()) is not None:
        raise RuntimeError(why)
    from selenium import webdriver  # a test extra: imported only when a browser is wanted
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='halyard-chromium-')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
