"""The dashboard in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium) against a real tuneforge server, agent and a short
model job on loopback. Asserts on the rendered DOM of each page (the job's row, its
curves' point counts, the task table, the agent row, the log and a record) and that
markup in a model file name and an agent's device key shows as text; saves a
screenshot of each page into $TUNEFORGE_SCREENSHOTS (default: a temporary folder).

Environment: TUNEFORGE_BIN (tuneforge-server, tuneforge-agent), TUNEFORGE_TEST_MODELS
(mlp.onnx), CHROMEDRIVER (default /usr/bin/chromedriver)."""
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import time

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

import tuneforge

BIN = pathlib.Path(os.environ.get("TUNEFORGE_BIN", "build/bin"))
MODELS = pathlib.Path(os.environ.get("TUNEFORGE_TEST_MODELS", "build/test_models"))
AGENT_KEY = "<script>alert(1)</script>"
MODEL_NAME = "<img src=x onerror=alert(2)>.onnx"
TRIALS = 12


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """A server with tokens and the dashboard, one agent whose key is markup, and a
    finished model job of alice's (the MLP, TRIALS trials)."""
    d = tmp_path_factory.mktemp("dashboard")
    tokens = {k: secrets.token_hex(16) for k in ("ops", "alice", "wall", "agent")}
    (d / "tokens").write_text(f"admin ops {tokens['ops']}\nuser alice {tokens['alice']}\n"
                              f"viewer wall {tokens['wall']}\nagent farm {tokens['agent']}\n")
    (d / "tokens").chmod(0o600)
    (d / "agent.token").write_text(tokens["agent"] + "\n")
    (d / "agent.token").chmod(0o600)
    server = subprocess.Popen([str(BIN / "tuneforge-server"), "--listen", "127.0.0.1:0", "--db", str(d / "dash.db"),
                               "--tokens", str(d / "tokens"), "--metrics-listen", "127.0.0.1:0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = http_port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        m = re.search(r"metrics on http://[^:]+:(\d+)/", line)
        if m:
            http_port = int(m.group(1))
        m = re.search(r"listening on port (\d+)", line)
        if m:
            port = int(m.group(1))
    assert port and http_port, "the server did not start"
    address = f"127.0.0.1:{port}"
    agent = subprocess.Popen([str(BIN / "tuneforge-agent"), "--server", address, "--device-key", AGENT_KEY,
                              "--token-file", str(d / "agent.token"), "--quiet-busy-pct", "0", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    model = d / MODEL_NAME
    shutil.copy(MODELS / "mlp.onnx", model)
    with tuneforge.Client(address, token=tokens["alice"]) as client:
        job = client.submit_model(str(model), trials=TRIALS, round_trials=4, device_key=AGENT_KEY,
                                  policy="random", batch_size=4)
        done = client.watch(job, progress=False)
        assert done["state"] == "SUCCEEDED", done
        measured = sum(1 for r in client.records(as_dataframe=False) if r["job_id"] == job)
    yield {"url": f"http://127.0.0.1:{http_port}", "tokens": tokens, "job": job, "done": done,
           "measured": measured}
    agent.terminate()
    server.terminate()
    agent.wait(30)
    server.wait(30)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


SHOTS = pathlib.Path(os.environ.get("TUNEFORGE_SCREENSHOTS") or
                     pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"tf_dashboard_shots_{os.getpid()}")


def shot(driver, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{name}.png"))


def wait(driver, condition, timeout=30):
    return WebDriverWait(driver, timeout).until(condition)


def login(driver, farm, who):
    driver.delete_all_cookies()
    driver.get(farm["url"] + "/")
    wait(driver, ec.url_contains("/login"))
    driver.find_element(By.ID, "token").send_keys(farm["tokens"][who])
    driver.find_element(By.CSS_SELECTOR, "form button").click()
    wait(driver, lambda d: d.find_element(By.ID, "who").text.startswith(who))


def test_a_wrong_token_stays_on_the_login_page(farm, browser):
    browser.delete_all_cookies()
    browser.get(farm["url"] + "/login")
    browser.find_element(By.ID, "token").send_keys("not-a-token-of-this-server")
    browser.find_element(By.CSS_SELECTOR, "form button").click()
    wait(browser, ec.visibility_of_element_located((By.ID, "failed")))
    assert "/login?failed=1" in browser.current_url
    shot(browser, "login")


def test_the_jobs_page_lists_the_model_job_with_its_owner_and_escaped_name(farm, browser):
    login(browser, farm, "alice")
    row = wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, f'tr[data-job-id="{farm["job"]}"]')))
    cells = row.find_elements(By.TAG_NAME, "td")
    assert cells[0].text == farm["job"]
    assert cells[1].text == "SUCCEEDED"
    assert cells[2].text == "alice"
    assert cells[3].text == "model " + MODEL_NAME  # the markup is text, not an element
    assert not browser.find_elements(By.CSS_SELECTOR, "#jobs img")
    assert f"{TRIALS} / {TRIALS}" in cells[4].text
    best = re.fullmatch(r"([0-9.]+) (µs|ms|s) \(est\.\)", cells[5].text)  # a model job: the estimate
    assert best, cells[5].text
    scale = {"µs": 1e-6, "ms": 1e-3, "s": 1}[best.group(2)]
    assert float(best.group(1)) * scale == pytest.approx(farm["done"]["estimated_seconds"], rel=0.01)
    assert browser.find_element(By.ID, "jobs-prev").get_attribute("disabled")  # one page: no pager moves
    assert browser.find_element(By.ID, "jobs-next").get_attribute("disabled")
    shot(browser, "jobs")


def test_the_job_page_draws_one_point_per_measurement_and_the_task_table(farm, browser):
    login(browser, farm, "wall")
    browser.get(farm["url"] + "/job?id=" + farm["job"])
    wait(browser, lambda d: d.find_element(By.ID, "curve-trials").get_attribute("data-points") not in (None, "0"))
    assert browser.find_element(By.ID, "job-id").text == farm["job"]
    assert int(browser.find_element(By.ID, "curve-trials").get_attribute("data-points")) == farm["measured"]
    assert int(browser.find_element(By.ID, "curve-time").get_attribute("data-points")) == farm["measured"]
    # The estimate has a point from the first measurement at which every task had a best.
    estimate = int(browser.find_element(By.ID, "curve-estimate").get_attribute("data-points"))
    assert 0 < estimate <= farm["measured"]
    tasks = browser.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")
    assert len(tasks) == len(farm["done"]["tasks"]) > 1
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in tasks] == [t["task"] for t in farm["done"]["tasks"]]
    summary = browser.find_element(By.ID, "summary").text
    assert "SUCCEEDED" in summary and "Estimated latency" in summary
    # The agent is this machine: the server timed the model and ran it with the best schedules.
    assert "Leftovers" in summary and "at the end" in summary, summary
    factors = [r.find_elements(By.TAG_NAME, "td")[6].text for r in tasks]
    assert all(re.fullmatch(r"[0-9.]+x", f) for f in factors), factors
    assert not browser.find_elements(By.CSS_SELECTOR, "button.cancel")  # a viewer, and the job is over
    shot(browser, "job")


def test_the_agents_page_shows_the_agent_and_its_markup_key_as_text(farm, browser):
    login(browser, farm, "wall")
    browser.get(farm["url"] + "/agents")
    row = wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#agents tbody tr[data-agent-id]")))
    cells = row.find_elements(By.TAG_NAME, "td")
    assert cells[1].text == AGENT_KEY
    assert cells[2].text in ("idle", "busy")
    assert int(cells[8].text) > 0  # measurements
    assert not browser.find_elements(By.CSS_SELECTOR, "#agents script")
    assert browser.execute_script("return document.querySelectorAll('script').length") == 2  # chart.js, app.js
    shot(browser, "agents")


def test_the_log_page_lists_best_records_and_shows_one(farm, browser):
    login(browser, farm, "wall")
    browser.get(farm["url"] + "/log")
    rows = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#log tbody tr"))
    assert len(rows) == len(farm["done"]["tasks"])
    assert all(r.find_elements(By.TAG_NAME, "td")[0].text for r in rows)
    assert browser.find_element(By.ID, "download").get_attribute("href").endswith("/api/log.jsonl?")
    rows[0].find_element(By.CSS_SELECTOR, "button[data-record-id]").click()
    record = wait(browser, ec.visibility_of_element_located((By.ID, "record")))
    assert farm["job"] in record.text and '"error": "none"' in record.text
    # The filter narrows the table (no workload of this operator).
    browser.find_element(By.NAME, "op").send_keys("conv2d")
    browser.find_element(By.CSS_SELECTOR, "form.filter button").click()
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#log tbody tr"))
    assert "op=conv2d" in browser.current_url
    browser.get(farm["url"] + "/log")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#log tbody tr"))
    shot(browser, "log")
