#!/usr/bin/env python3
"""End-to-end tests of the browser client in headless Chromium against a live `deltasnap serve`.

Run by .ci/browser-tests.sh, which builds the module and provides BIN, REPO and the venv.
The page under test is clients/typescript/example/ (the example app), served through
e2e/proxy.py, which injects faults into the API on demand. Tests run in order (they share
one server); each uses its own IndexedDB database (?db=…) unless it tests continuity.
"""
import hashlib
import json
import re
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

REPO = os.path.abspath(os.environ.get("REPO", os.path.join(os.path.dirname(__file__), "../../..")))
BIN = os.path.abspath(os.environ.get("BIN", os.path.join(REPO, ".build/debug/deltasnap")))
ARTIFACTS = os.path.abspath(os.environ.get("ARTIFACTS", os.path.join(REPO, ".build/browser-artifacts")))
EXAMPLE = os.path.join(REPO, "clients/typescript/example")
HERE = os.path.dirname(os.path.abspath(__file__))
ADMIN = "e2e-admin-token"
SECRET = "e2e-jwt-secret"
WAIT = 20


def http_bytes(method, url, body=None, headers=None, timeout=10):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def http(method, url, body=None, headers=None, timeout=10):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class Env:
    """The server, the proxy and the browser, started once for all tests."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="deltasnap-e2e-")
        self.db = os.path.join(self.tmp, "store.sqlite")
        env = dict(os.environ, SOURCE_DATE_EPOCH="1767225600", DELTASNAP_EPOCH="00000000005a3b1e")
        # The same store `make snapshots` bakes from: the bundled snapshot's token is its head.
        subprocess.run([BIN, "import", "--db", self.db, "--collection", "countries", "--quiet",
                        os.path.join(REPO, "Snapshots/sample/countries.ndjson")], check=True, env=env)
        keys = os.path.join(self.tmp, "keys")
        subprocess.run([BIN, "keygen", "--out", keys], check=True, capture_output=True)
        self.key = os.path.join(keys, "signing.key")
        baked = os.path.join(self.tmp, "baked")
        subprocess.run([BIN, "bake", "--db", self.db, "--collection", "countries", "--out", baked, "--signing-key", self.key], check=True, capture_output=True)
        self.static = os.path.join(self.tmp, "static")
        shutil.copytree(EXAMPLE, self.static)
        for name in ("countries.snapshot", "countries.index"):
            shutil.copy(os.path.join(baked, name), self.static)
        shutil.copy(os.path.join(keys, "signing.pub"), self.static)
        for name in ("harness.html", "harness.js"):
            shutil.copy(os.path.join(HERE, name), self.static)
        self.jwt = subprocess.run([BIN, "token", "--secret", SECRET, "--subject", "alice", "--write", "countries"],
                                  check=True, capture_output=True, text=True).stdout.strip()
        # Partitions under access rules (PROTOCOL.md §10), for the view tests: alice owns
        # attempts/alice and is a member of sets/8271; bob owns attempts/bob.
        self.rules = os.path.join(self.tmp, "rules.yaml")
        with open(self.rules, "w") as f:
            f.write("collections:\n"
                    "  countries: { read: public, write: claims }\n"
                    "  notes: { read: public, write: claims }\n"
                    "  album: { read: public, write: claims }\n"
                    "  attempts: { partitioned: true, read: owner, write: owner }\n"
                    "  sets: { partitioned: true, read: member, write: member }\n"
                    "memberships: members\n")
        for partition, record in (("attempts/alice", {"id": "a1", "score": 3}), ("attempts/bob", {"id": "b1", "score": 5}),
                                  ("sets/8271", {"id": "q1", "question": "2+2"}), ("sets/9000", {"id": "q1", "question": "3+3"}),
                                  ("members/alice", {"id": "sets/8271", "role": "write"})):
            subprocess.run([BIN, "import", "--db", self.db, "--collection", partition, "--quiet", "-"],
                           input=json.dumps(record) + "\n", check=True, capture_output=True, text=True)
        self.tokens = {who: subprocess.run([BIN, "token", "--secret", SECRET, "--subject", who], check=True, capture_output=True,
                                           text=True).stdout.strip() for who in ("alice", "bob")}
        # A writer of notes (with photos), for the attachment tests and the example app.
        self.notes_jwt = subprocess.run([BIN, "token", "--secret", SECRET, "--subject", "alice", "--write", "notes,album"],
                                        check=True, capture_output=True, text=True).stdout.strip()
        self.server = None
        self.server_port = 0
        self.start_server()
        self.proxy = subprocess.Popen([sys.executable, os.path.join(HERE, "proxy.py"), "--upstream", f"127.0.0.1:{self.server_port}", "--static", self.static],
                                      stdout=subprocess.PIPE, text=True)
        self.proxy_port = int(self.proxy.stdout.readline().strip())
        self.proxy.stdout.close()
        self.url = f"http://127.0.0.1:{self.proxy_port}"
        options = webdriver.ChromeOptions()
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900",
                    f"--user-data-dir={os.path.join(self.tmp, 'profile')}", "--disable-background-timer-throttling",
                    "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows"):
            options.add_argument(arg)
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        self.driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(30)

    def start_server(self):
        args = [BIN, "serve", "--db", self.db, "--port", str(self.server_port), "--write-token", ADMIN, "--jwt-secret", SECRET,
                "--signing-key", self.key, "--rules", self.rules, "--static", EXAMPLE, "--log-level", "error", "--max-body-bytes", str(256 << 20)]
        out = os.path.join(self.tmp, "serve.out")
        with open(out, "w") as f:
            self.server = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.server_port == 0:
                with open(out) as f:
                    match = re.search(r"http://127\.0\.0\.1:(\d+)", f.read())
                if match:
                    self.server_port = int(match.group(1))
            if self.server_port:
                try:
                    if http("GET", f"{self.server_url}/healthz")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("deltasnap serve did not come up: " + open(out).read()[-2000:])

    @property
    def server_url(self):
        return f"http://127.0.0.1:{self.server_port}"

    def stop_server(self):
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()

    def close(self):
        try:
            self.driver.quit()
        finally:
            self.stop_server()
            self.proxy.terminate()
            self.proxy.wait(timeout=10)
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    def mode(self, mode):
        http("POST", f"{self.url}/__proxy/mode?set={mode}")

    def log(self, clear=False):
        return self.proxy_state(clear)["log"]

    def proxy_state(self, clear=False):
        status, _, body = http("POST" if clear else "GET", f"{self.url}/__proxy/log" + ("?clear=1" if clear else ""))
        return json.loads(body)

    def put_file(self, base, data, media="image/png"):
        """Stores a file on the server as the admin; returns its reference."""
        status, _, text = http("PUT", f"{self.server_url}{base}/attachments/{hashlib.sha256(data).hexdigest()}", data,
                               {"Authorization": f"Bearer {ADMIN}", "Content-Type": media})
        assert status == 201, (status, text)
        return json.loads(text)

    def harness(self, query, base=None):
        """Loads the bare replica (harness.html) and waits until it is open."""
        self.driver.get(f"{base or self.url}/harness.html?{query}")
        WebDriverWait(self.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready"))

    def admin(self, method, record_id, value=None):
        body = json.dumps(value).encode() if value is not None else None
        status, headers, text = http(method, f"{self.server_url}/v1/collections/countries/records/{record_id}", body, {"Authorization": f"Bearer {ADMIN}"})
        assert status == 200, (status, text)
        return json.loads(text)

    def head_token(self):
        status, headers, _ = http("HEAD", f"{self.server_url}/v1/collections/countries")
        return headers["ETag"].strip('"')

    def server_record_in(self, collection, record_id):
        _, _, body = http("GET", f"{self.server_url}/v1/collections/{collection}")
        for line in body.splitlines()[1:]:
            line = line.rstrip(",")
            if line.startswith("{") and json.loads(line)["id"] == record_id:
                return json.loads(line)
        return None

    def server_record(self, record_id):
        _, _, body = http("GET", f"{self.server_url}/v1/collections/countries")
        for line in body.splitlines()[1:]:
            line = line.rstrip(",")
            if line.startswith("{") and json.loads(line)["id"] == record_id:
                return json.loads(line)
        return None

    def open(self, query, base=None, first_sync=True):
        """Loads the example page; by default until the syncing tab's first sync is done."""
        self.driver.get(f"{base or self.url}/?{query}")
        WebDriverWait(self.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready"))
        ready = self.driver.execute_script("return document.body.dataset.ready")
        assert ready == "1", self.driver.execute_script("return JSON.stringify(window.deltasnapLog)")
        if first_sync:
            self.wait(lambda: self.syncs(), "the first sync")

    def js(self, body, *args):
        """Runs an async JS function body in the page; returns its value (errors raise)."""
        script = ("const done = arguments[arguments.length - 1]; const args = Array.from(arguments).slice(0, -1);"
                  "(async () => { " + body + " })().then((v) => done({ ok: v === undefined ? null : v }), (e) => done({ error: String(e && e.stack || e) }));")
        result = self.driver.execute_async_script(script, *args)
        if "error" in result:
            raise AssertionError(result["error"])
        return result["ok"]

    def wait(self, predicate, what, timeout=WAIT):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.15)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def sync(self):
        return self.js("return await window.replica.sync({ waits: 'serverRequested' });")

    def count(self):
        return self.js("return (await window.replica.all()).length;")

    def syncs(self):
        return self.js("return window.deltasnapLog.filter((e) => e.type === 'sync').map((e) => e.detail);")


ENV = None


def setUpModule():
    global ENV
    ENV = Env()


def tearDownModule():
    if ENV:
        ENV.close()


class BrowserClient(unittest.TestCase):
    def setUp(self):
        ENV.mode("normal")
        handles = ENV.driver.window_handles
        for handle in handles[1:]:
            ENV.driver.switch_to.window(handle)
            ENV.driver.close()
        ENV.driver.switch_to.window(handles[0])

    def test_01_first_start_offline_from_the_bundle(self):
        ENV.mode("offline")
        ENV.open("db=offline&poll=0")
        self.assertEqual(ENV.count(), 249)
        self.assertEqual(ENV.js("return (await window.replica.get('AD')).name;"), "Andorra")
        ENV.wait(lambda: ENV.syncs(), "the first sync attempt")
        attempt = ENV.syncs()[0]["pull"]
        self.assertEqual(attempt["kind"], "failed", attempt)
        self.assertTrue(attempt["unavailable"])
        status = ENV.js("return await window.replica.status();")
        self.assertEqual(status["status"], "retrying")
        self.assertEqual(status["indicator"], "amber")
        self.assertEqual(status["count"], 249)
        self.assertTrue(any(e["status"] == "dropped" for e in ENV.log()))

    def test_02_not_modified_then_a_delta(self):
        ENV.log(clear=True)
        ENV.open("db=pull&poll=0")
        first = ENV.wait(lambda: ENV.syncs(), "the first sync")[0]
        self.assertEqual(first["pull"]["kind"], "not-modified", first)
        sent = [e for e in ENV.log() if e["path"] == "/v1/collections/countries"]
        self.assertEqual(sent[0]["ifNoneMatch"], '"00000000005a3b1e.1"')
        self.assertEqual(sent[0]["status"], 304)
        self.assertEqual(ENV.driver.find_element("id", "dot").get_attribute("data-indicator"), "green")
        ENV.admin("PUT", "AD", {"name": "Andorra (delta)", "alpha3": "AND"})
        result = ENV.sync()
        self.assertEqual(result["pull"], {"kind": "applied", "full": False, "changedIds": ["AD"], "count": 249, "mentionsFiles": False})
        self.assertEqual(ENV.js("return (await window.replica.get('AD')).name;"), "Andorra (delta)")
        self.assertEqual(ENV.log()[-1]["kind"], "delta")
        self.assertEqual(ENV.js("return (await window.replica.status()).token;"), ENV.head_token())

    def test_03_a_corrupted_delta_resets_with_no_moment_of_missing_data(self):
        ENV.open("db=pull&poll=0")
        ENV.wait(lambda: ENV.syncs(), "the sync at start")
        ENV.admin("PUT", "AE", {"name": "Emirates (after a bad delta)"})
        ENV.js("""window.minCount = Infinity;
                  const sample = async () => { window.minCount = Math.min(window.minCount, (await window.replica.all()).length); };
                  window.sampler = setInterval(sample, 2);
                  window.replica.addEventListener('change', sample);""")
        ENV.log(clear=True)
        ENV.mode("corrupt-delta")
        result = ENV.sync()
        ENV.js("clearInterval(window.sampler);")
        self.assertEqual(result["pull"]["kind"], "reset", result)
        self.assertIn("checksum", result["pull"]["reason"])
        log = [e for e in ENV.log() if e["path"] == "/v1/collections/countries"]
        self.assertEqual([(e["kind"], bool(e.get("damaged")), e["ifNoneMatch"] is not None) for e in log], [("delta", True, True), ("full", False, False)])
        self.assertGreaterEqual(ENV.js("return window.minCount;"), 249)
        self.assertEqual(ENV.js("return (await window.replica.get('AE')).name;"), "Emirates (after a bad delta)")
        self.assertEqual(ENV.js("return (await window.replica.status()).token;"), ENV.head_token())

    def test_04_an_offline_edit_survives_a_reload_and_lands_once(self):
        ENV.open(f"db=edit&poll=0&token={ENV.jwt}")
        ENV.wait(lambda: ENV.syncs(), "the first sync")
        version_before = int(ENV.head_token().split(".")[1])
        ENV.stop_server()
        ENV.js("await window.replica.patch('FR', { capital: 'Paris (offline edit)' });")
        self.assertEqual(ENV.js("return (await window.replica.get('FR')).capital;"), "Paris (offline edit)")
        self.assertEqual(ENV.driver.find_element("id", "dot").get_attribute("data-indicator"), "amber")
        result = ENV.sync()
        self.assertIsNotNone(result["push"]["failure"])
        self.assertEqual(result["push"]["stillQueued"], 1)
        ENV.driver.refresh()
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        pending = ENV.js("return await window.replica.pendingWrites();")
        self.assertEqual([(w["op"], w["id"], w["value"]) for w in pending], [("patch", "FR", '{"capital":"Paris (offline edit)"}')])
        self.assertEqual(ENV.js("return (await window.replica.get('FR')).capital;"), "Paris (offline edit)")
        self.assertIn("patch FR", ENV.driver.find_element("id", "queue").text)
        ENV.start_server()
        ENV.sync()
        ENV.wait(lambda: ENV.js("return (await window.replica.pendingWrites()).length;") == 0, "the write to land and settle")
        self.assertEqual(sum(s["push"]["accepted"] for s in ENV.syncs()), 1)
        self.assertEqual(ENV.server_record("FR")["capital"], "Paris (offline edit)")
        self.assertEqual(int(ENV.head_token().split(".")[1]), version_before + 1)
        # Pushing again (e.g. an answer that was lost) changes nothing on the server.
        ENV.sync()
        self.assertEqual(int(ENV.head_token().split(".")[1]), version_before + 1)
        ENV.wait(lambda: ENV.driver.find_element("id", "dot").get_attribute("data-indicator") == "green", "the green dot")

    def test_05_a_refused_write_is_rolled_back_and_reported(self):
        ENV.open(f"db=edit&poll=0&token={ENV.jwt}")
        ENV.admin("DELETE", "ZW")
        ENV.js("await window.replica.patch('ZW', { name: 'Zimbabwe (edited)' });")
        self.assertEqual(ENV.js("return (await window.replica.get('ZW')).name;"), "Zimbabwe (edited)")
        # The syncing tab pushes within 50 ms of a write; sync() makes sure it happened.
        ENV.sync()
        refused = ENV.wait(lambda: ENV.js("return window.deltasnapLog.filter((e) => e.type === 'refused').flatMap((e) => e.detail);"), "the refusal")
        self.assertEqual([(r["id"], r["code"]) for r in refused], [("ZW", "not_found")])
        self.assertIsNone(ENV.js("return (await window.replica.get('ZW')) ?? null;"))
        self.assertTrue(ENV.js("return window.deltasnapLog.some((e) => e.type === 'refused');"))
        self.assertIn("not saved", ENV.driver.find_element("id", "banners").text)
        # A write that can never be accepted is refused at once, nothing queued.
        error = ENV.js("try { await window.replica.insert('AD', { name: 'again' }); return null; } catch (e) { return [e.name, e.code]; }")
        self.assertEqual(error, ["WriteRefusedError", "exists"])
        self.assertEqual(ENV.js("return (await window.replica.pendingWrites()).length;"), 0)

    def test_06_forged_data_is_refused_with_trusted_keys(self):
        ENV.mode("forge-body")
        ENV.open("db=signed-fresh&trusted=1&bundle=0&poll=0")
        first = ENV.wait(lambda: ENV.syncs(), "the first sync")[0]["pull"]
        self.assertEqual(first["kind"], "failed", first)
        self.assertIn("digest", first["reason"])
        self.assertEqual(ENV.count(), 0)
        # The browser's HTTP cache would answer /v1/index for 30 s (max-age): ask the network.
        ENV.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        ENV.mode("forge-index")
        result = ENV.sync()["pull"]
        self.assertEqual((result["kind"], result["code"]), ("failed", "bad_signature"), result)
        ENV.mode("normal")
        result = ENV.sync()["pull"]
        self.assertIn(result["kind"], ("applied", "reset"), result)
        self.assertEqual(ENV.count(), ENV.js("return (await window.replica.status()).count;"))
        self.assertEqual(ENV.js("return (await window.replica.status()).token;"), ENV.head_token())
        # From the signed bundle: verified against its index, then a signed delta.
        ENV.open("db=signed-bundle&trusted=1&poll=0")
        self.assertEqual(ENV.js("return (await window.replica.get('AF')).name;"), "Afghanistan")
        first = ENV.wait(lambda: ENV.syncs(), "the first sync")[0]["pull"]
        self.assertEqual(first["kind"], "applied", first)
        self.assertFalse(first["full"])
        ENV.admin("PUT", "AF", {"name": "Afghanistan (signed)"})
        ENV.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        ENV.mode("forge-index")
        self.assertEqual(ENV.sync()["pull"]["code"], "bad_signature")
        self.assertEqual(ENV.js("return (await window.replica.get('AF')).name;"), "Afghanistan")

    def test_07_two_tabs_one_syncs_both_see_changes_and_the_other_takes_over(self):
        ENV.open(f"db=tabs&poll=1&token={ENV.jwt}")
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "tab A to lead")
        tab_a = ENV.driver.current_window_handle
        ENV.driver.switch_to.new_window("tab")
        tab_b = ENV.driver.current_window_handle
        ENV.open(f"db=tabs&poll=1&token={ENV.jwt}", first_sync=False)
        time.sleep(0.5)
        self.assertFalse(ENV.js("return window.replica.isSyncingTab;"))
        # A write in the tab that does not sync: visible in both, pushed by the syncing tab.
        ENV.js("await window.replica.patch('DE', { capital: 'Berlin (tab B)' });")
        ENV.driver.switch_to.window(tab_a)
        ENV.wait(lambda: ENV.js("return (await window.replica.get('DE')).capital;") == "Berlin (tab B)", "tab A to see tab B's write")
        ENV.wait(lambda: (ENV.server_record("DE") or {}).get("capital") == "Berlin (tab B)", "the syncing tab to push it")
        # A change on the server: pulled by tab A, seen by tab B.
        ENV.admin("PUT", "IT", {"name": "Italy (server)"})
        ENV.driver.switch_to.window(tab_b)
        ENV.wait(lambda: ENV.js("return (await window.replica.get('IT')).name;") == "Italy (server)", "tab B to see the pulled change")
        self.assertFalse(ENV.js("return window.replica.isSyncingTab;"))
        self.assertIn("Italy (server)", ENV.driver.find_element("id", "list").text)
        # Closing the syncing tab hands over.
        ENV.driver.switch_to.window(tab_a)
        ENV.driver.close()
        ENV.driver.switch_to.window(tab_b)
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "tab B to take over")
        ENV.admin("PUT", "ES", {"name": "Spain (after hand-over)"})
        ENV.wait(lambda: ENV.js("return (await window.replica.get('ES')).name;") == "Spain (after hand-over)", "tab B to pull")

    def test_07b_a_frozen_syncing_tab_hands_over(self):
        ENV.open(f"db=freeze&poll=1&token={ENV.jwt}")
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "tab A to lead")
        tab_a = ENV.driver.current_window_handle
        ENV.driver.switch_to.new_window("tab")
        tab_b = ENV.driver.current_window_handle
        ENV.open(f"db=freeze&poll=1&token={ENV.jwt}", first_sync=False)
        self.assertFalse(ENV.js("return window.replica.isSyncingTab;"))
        # The browser freezes tab A (as it does to background tabs): A hands the lock over.
        ENV.driver.switch_to.window(tab_a)
        ENV.driver.execute_cdp_cmd("Page.setWebLifecycleState", {"state": "frozen"})
        ENV.driver.switch_to.window(tab_b)
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "tab B to take over from the frozen tab")
        ENV.admin("PUT", "CA", {"name": "Canada (while A sleeps)"})
        ENV.wait(lambda: ENV.js("return (await window.replica.get('CA')).name;") == "Canada (while A sleeps)", "tab B to pull")
        # Tab A wakes up as a follower and sees what happened meanwhile.
        ENV.driver.switch_to.window(tab_a)
        ENV.driver.execute_cdp_cmd("Page.setWebLifecycleState", {"state": "active"})
        self.assertFalse(ENV.js("return window.replica.isSyncingTab;"))
        self.assertEqual(ENV.js("return (await window.replica.get('CA')).name;"), "Canada (while A sleeps)")
        ENV.driver.switch_to.window(tab_b)
        self.assertTrue(ENV.js("return window.replica.isSyncingTab;"))

    def test_08_a_deleted_database_is_rebuilt_from_the_bundle(self):
        ENV.open(f"db=evicted&poll=0&token={ENV.jwt}")
        ENV.wait(lambda: ENV.syncs(), "the first sync")
        ENV.mode("offline")
        ENV.js("await window.replica.put('XA', { name: 'Never synced' });")
        ENV.js("""window.replica.close();
                  await new Promise((resolve, reject) => { const r = indexedDB.deleteDatabase('evicted'); r.onsuccess = resolve; r.onerror = reject; });""")
        ENV.mode("normal")
        ENV.driver.refresh()
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        self.assertEqual(ENV.js("return window.replica.storageLoss;"), {"lostWrites": 1})
        self.assertIn("1 unsynced change(s) were lost", ENV.driver.find_element("id", "banners").text)
        self.assertIsNone(ENV.js("return (await window.replica.get('XA')) ?? null;"))
        self.assertGreater(ENV.count(), 240)
        ENV.wait(lambda: ENV.syncs(), "the pull after the rebuild")
        self.assertEqual(ENV.count(), ENV.js("return (await window.replica.status()).count;"))
        self.assertEqual(ENV.js("return (await window.replica.status()).token;"), ENV.head_token())
        self.assertEqual(ENV.js("return (await window.replica.get('IT')).name;"), "Italy (server)")

    def test_09_backoff_honours_retry_after(self):
        ENV.open("db=backoff&poll=0")
        ENV.wait(lambda: ENV.syncs(), "the first sync")
        ENV.mode("retry-after")
        before = time.time() * 1000
        result = ENV.js("return await window.replica.sync();")
        self.assertEqual(result["pull"]["kind"], "failed")
        self.assertGreaterEqual(result["pull"]["retryAt"], before + 29_000)
        ENV.log(clear=True)
        result = ENV.js("return await window.replica.sync();")
        self.assertEqual(result["pull"]["kind"], "deferred")
        self.assertEqual(ENV.log(), [])
        ENV.driver.refresh()
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        self.assertEqual(ENV.js("return (await window.replica.sync()).pull.kind;"), "deferred", "the wait survives a reload")

    def test_10_screenshot_of_the_example_page_served_by_deltasnap(self):
        # Straight from `deltasnap serve --static clients/typescript/example`, without a token:
        # the edit stays queued (the push gets 401), so the dot is amber and the queue shows it.
        ENV.open("db=screenshot&poll=0", base=ENV.server_url)
        ENV.wait(lambda: ENV.syncs(), "the first sync")
        ENV.driver.find_element("id", "edit-id").send_keys("AD")
        ENV.driver.find_element("id", "edit-name").send_keys("Andorra (edited offline)")
        ENV.driver.find_element("css selector", "#edit button").click()
        ENV.wait(lambda: "Andorra (edited offline)" in ENV.driver.find_element("id", "list").text, "the edit to show")
        ENV.driver.find_element("id", "search").send_keys("and")
        ENV.wait(lambda: ENV.driver.find_element("id", "dot").get_attribute("data-indicator") == "amber", "the amber dot")
        ENV.wait(lambda: "patch AD" in ENV.driver.find_element("id", "queue").text, "the queue view")
        time.sleep(0.3)
        os.makedirs(ARTIFACTS, exist_ok=True)
        path = os.path.join(ARTIFACTS, "example.png")
        ENV.driver.save_screenshot(path)
        self.assertGreater(os.path.getsize(path), 10_000)
        self.assertIn("Andorra (edited offline)", ENV.driver.find_element("id", "list").text)
        self.assertNotIn("Afghanistan", ENV.driver.find_element("id", "list").text)


    def test_10b_offline_edits_to_one_record_fold_into_one_write(self):
        # No background sync: a push between the two writes would (rightly) prevent the fold.
        ENV.open(f"db=fold&sync=0&token={ENV.jwt}", first_sync=False)
        ENV.mode("offline")
        ENV.js("""await window.replica.patch('NO', { capital: 'Oslo' });
                  await window.replica.patch('NO', { motto: 'Alt for Norge', capital: 'Oslo (twice)' });""")
        pending = ENV.js("return await window.replica.pendingWrites();")
        self.assertEqual([(w["seq"], w["op"], w["value"]) for w in pending], [(1, "patch", '{"capital":"Oslo (twice)","motto":"Alt for Norge"}')])
        ENV.mode("normal")
        ENV.sync()
        ENV.wait(lambda: ENV.js("return (await window.replica.pendingWrites()).length;") == 0, "the folded write to land")
        record = ENV.server_record("NO")
        self.assertEqual((record["capital"], record["motto"]), ("Oslo (twice)", "Alt for Norge"))

    def test_11_a_tab_closed_during_a_100000_record_apply_leaves_the_old_or_the_new_state(self):
        def post(revision):
            data = subprocess.run([BIN, "generate", "--count", "100000", "--revision", str(revision)], check=True, capture_output=True).stdout
            status, _, text = http("POST", f"{ENV.server_url}/v1/collections/big/records", data, {"Authorization": f"Bearer {ADMIN}"}, timeout=120)
            self.assertEqual(status, 200, text)
            return json.loads(text)["token"]

        def in_new_tab(query, first_sync):
            main = ENV.driver.current_window_handle
            ENV.driver.switch_to.new_window("tab")
            ENV.driver.get(f"{ENV.url}/harness.html?collection=big&{query}")
            WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
            if first_sync:
                ENV.wait(lambda: ENV.syncs(), "the first sync", timeout=120)
            return main

        old = post(0)
        trials = ("big-a", "big-b", "big-c")
        for db in trials:
            main = in_new_tab(f"db={db}", True)
            self.assertEqual(ENV.syncs()[0]["pull"]["kind"], "applied")
            self.assertEqual(ENV.js("return (await window.replica.status()).count;"), 100000)
            ENV.driver.close()
            ENV.driver.switch_to.window(main)
        new = post(1)
        seen = {}
        for db, delay in zip(trials, (0.0, 0.1, 4.0)):
            main = in_new_tab(f"db={db}", False)
            # Close the tab once the 100,000-record delta is verified and its transaction is
            # being written (or after it finished, if it was quicker than this loop).
            ENV.wait(lambda: ENV.driver.execute_script("return window.phase === 'commit' || window.deltasnapLog.length > 0;"), "the commit", timeout=120)
            time.sleep(delay)
            ENV.driver.close()
            ENV.driver.switch_to.window(main)
            main = in_new_tab(f"db={db}&sync=0", False)
            state = ENV.js("const s = await window.replica.status(); return { token: s.token, count: s.count, check: await window.replica.verify() };")
            ENV.driver.close()
            ENV.driver.switch_to.window(main)
            self.assertIn(state["token"], (old, new), state)
            self.assertEqual(state["count"], 100000)
            self.assertTrue(state["check"]["ok"], state)
            seen[db] = "old" if state["token"] == old else "new"
        print(f"\n    tab closed during the apply, state after: {seen}", file=sys.stderr)

    def test_12_a_users_view_moves_partitions_in_and_out(self):
        """DeltaSnapView: exactly the token's slice, a local write, move-in, move-out, a 304."""
        ENV.driver.get(f"{ENV.url}/harness.html?db=view-page&sync=0")
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")

        def open_view(who):
            ENV.js("const { DeltaSnapView } = await import('./deltasnap.js');"
                   "window.views = window.views || {};"
                   "window.views[args[0]] = await DeltaSnapView.open({ accessToken: args[1], trustedKeys: [args[2]], databasePrefix: 'e2e-view' });",
                   who, ENV.tokens[who], open(os.path.join(ENV.static, "signing.pub")).read().strip())

        def sync(who):
            return ENV.js("const r = await window.views[args[0]].sync(); return JSON.parse(JSON.stringify(r, (k, v) => typeof v === 'bigint' ? String(v) : v));", who)

        def databases():
            return sorted(d["name"] for d in ENV.js("return await indexedDB.databases();") if d["name"].startswith("e2e-view:"))

        def membership(method, partition, role=None):
            body = json.dumps({"id": partition, "role": role}).encode() if role else None
            status, _, text = http(method, f"{ENV.server_url}/v1/collections/members/partitions/alice/records/{urllib.parse.quote(partition, safe='')}",
                                   body, {"Authorization": f"Bearer {ADMIN}"})
            self.assertEqual(status, 200, text)

        open_view("alice")
        first = sync("alice")
        self.assertEqual(first["index"]["kind"], "applied", first)
        # Her partitions, and the public collections (earlier tests made `big` too).
        partitions = lambda report: [p for p in report["held"] if "/" in p]
        self.assertEqual(partitions(first), ["attempts/alice", "members/alice", "sets/8271"], first)
        self.assertIn("countries", first["held"])
        self.assertEqual(ENV.js("return (await window.views.alice.query('sets')).map((r) => r.question);"), ["2+2"])
        # Nothing of bob's reached the browser.
        self.assertFalse(any("bob" in name or "9000" in name for name in databases()), databases())
        self.assertEqual(sync("alice")["index"]["kind"], "not-modified")

        # A local write in her own partition, pushed by the next sync.
        ENV.js("await (await window.views.alice.replica('attempts/alice')).insert('a2', { score: 9 });")
        pushed = sync("alice")
        self.assertEqual(pushed["pushes"]["attempts/alice"]["accepted"], 1, pushed)
        status, _, body = http("GET", f"{ENV.server_url}/v1/collections/attempts/partitions/alice", headers={"Authorization": f"Bearer {ENV.tokens['alice']}"})
        self.assertIn('"id":"a2"', body)

        # Move-in: a membership granted; move-out: one revoked — nothing else refetched.
        membership("PUT", "sets/9000", "read")
        moved_in = sync("alice")
        self.assertIn("sets/9000", moved_in["held"])
        self.assertEqual(sorted(moved_in["partitions"]), ["members/alice", "sets/9000"], moved_in)
        self.assertEqual(ENV.js("return (await window.views.alice.query('sets')).map((r) => r.question).sort();"), ["2+2", "3+3"])
        ENV.js("await (await window.views.alice.replica('sets/8271')).patch('q1', { note: 'unsent' });")
        ENV.mode("offline")
        offline = sync("alice")
        self.assertEqual(offline["index"]["kind"], "failed", offline)
        ENV.mode("normal")
        membership("DELETE", "sets/8271")
        moved_out = sync("alice")
        self.assertEqual(list(moved_out["dropped"]), ["sets/8271"], moved_out)
        self.assertEqual(len(moved_out["dropped"]["sets/8271"]), 1, "the unsent write is reported")
        self.assertNotIn("sets/8271", moved_out["held"])
        self.assertFalse(any(name.endswith(":sets/8271") for name in databases()), databases())
        self.assertEqual(ENV.js("return (await window.views.alice.query('sets')).map((r) => r.question);"), ["3+3"])

        # Bob's view is his: his partition, never hers.
        open_view("bob")
        bob = sync("bob")
        self.assertEqual(partitions(bob), ["attempts/bob"], bob)
        self.assertIn("countries", bob["held"])

    def test_12b_a_moved_out_partitions_urls_are_not_served_from_the_http_cache(self):
        """Nothing private outlives access: the client never lets the browser's HTTP cache keep a private answer."""
        alice = f"Bearer {ENV.tokens['alice']}"
        base = "/v1/collections/sets/partitions/7000"

        def write(path, value=None, method="PUT"):
            body = json.dumps(value).encode() if value is not None else None
            status, _, text = http(method, f"{ENV.server_url}{path}", body, {"Authorization": f"Bearer {ADMIN}"})
            self.assertEqual(status, 200, text)

        membership = "/v1/collections/members/partitions/alice/records/" + urllib.parse.quote("sets/7000", safe="")
        write(f"{base}/records/c1", {"question": "4+4"})
        write(membership, {"id": "sets/7000", "role": "read"})

        # The server's rule: a private answer is never stored; public ones as before.
        status, headers, text = http("GET", f"{ENV.server_url}/v1/index", headers={"Authorization": alice})
        self.assertEqual((status, headers.get("Cache-Control")), (200, "private, no-store"))
        tokens = {name: entry["token"] for name, entry in json.loads(text)["index"]["collections"].items()}
        for path in (base, f"{base}/snapshots/{tokens['sets/7000']}"):
            status, headers, _ = http("GET", f"{ENV.server_url}{path}", headers={"Authorization": alice})
            self.assertEqual((status, headers.get("Cache-Control")), (200, "private, no-store"), path)
        status, headers, _ = http("GET", f"{ENV.server_url}/v1/collections/countries/snapshots/{tokens['countries']}")
        self.assertEqual((status, headers.get("Cache-Control")), (200, "public, max-age=31536000, immutable"))

        # The client's rule, held against an older server's headers (`immutable` for a year on
        # the token-named URLs): a user's two views — signed (the index, snapshot and delta
        # URLs) and unsigned (the collection URL) — take the partition in and apply a change.
        ENV.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        ENV.driver.get(f"{ENV.url}/harness.html?db=view-cache&sync=0")
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        ENV.js("const { DeltaSnapView } = await import('./deltasnap.js');"
               "window.views = { signed: await DeltaSnapView.open({ accessToken: args[0], trustedKeys: [args[1]], databasePrefix: 'e2e-view' }),"
               "                 plain: await DeltaSnapView.open({ accessToken: args[0], databasePrefix: 'e2e-cache' }) };",
               ENV.tokens["alice"], open(os.path.join(ENV.static, "signing.pub")).read().strip())

        def sync_views():
            return ENV.js("const out = {}; for (const [k, v] of Object.entries(window.views)) out[k] = await v.sync();"
                          "return JSON.parse(JSON.stringify(out, (k, v) => typeof v === 'bigint' ? String(v) : v));")

        def questions():
            return ENV.js("const out = {}; for (const [k, v] of Object.entries(window.views)) out[k] = (await v.query('sets')).map((r) => r.question).sort(); return out;")

        def databases():
            return sorted(d["name"] for d in ENV.js("return await indexedDB.databases();") if d["name"].endswith(":sets/7000"))

        ENV.mode("old-cache-control")
        ENV.log(clear=True)
        for name, report in sync_views().items():
            self.assertEqual(report["partitions"].get("sets/7000", {}).get("kind"), "applied", (name, report))
        write(f"{base}/records/c2", {"question": "5+5"})
        for name, report in sync_views().items():
            self.assertEqual(report["partitions"]["sets/7000"]["kind"], "applied", (name, report))
        self.assertEqual({k: "4+4" in v and "5+5" in v for k, v in questions().items()}, {"signed": True, "plain": True})
        self.assertEqual(len(databases()), 2, databases())
        log = ENV.log()
        mine = [e for e in log if e["path"].startswith(base) or e["path"] == "/v1/index"]
        snapshot = next(e["path"] for e in mine if "/snapshots/" in e["path"])
        delta = next(e["path"] for e in mine if "/deltas/" in e["path"])
        self.assertEqual([e["cacheControl"] for e in mine if e["path"] in (snapshot, delta)], ["private, max-age=31536000, immutable"] * 2, mine)
        self.assertEqual({e["cacheControl"] for e in mine if e["path"] in (base, "/v1/index") and e["status"] == 200}, {"private, no-cache"}, mine)
        # `only-if-cached` asks the browser's HTTP cache alone, fresh or stale: nothing was kept.
        transfer_sizes = "return args[0].map((u) => performance.getEntriesByName(new URL(u, location.href).href).map((e) => e.transferSize));"
        probe = ("return await Promise.all(args[0].map(async (url) => {"
                 "  try { const r = await fetch(url, { cache: 'only-if-cached', mode: 'same-origin', headers: { Authorization: args[1] } });"
                 "        return r.status === 504 ? 'not cached' : `cached ${r.status}`; }"
                 "  catch (e) { return 'not cached'; } }));")
        urls = [base, snapshot, delta, "/v1/index"]
        self.assertEqual(ENV.js(probe, urls, alice), ["not cached"] * 4, urls)
        # What the probe finds when a request lets the cache keep an answer (as the client did
        # before): alice's own snapshot, then read back without any token by a plain fetch —
        # served by the cache, the server never asked.
        mine_too = f"/v1/collections/attempts/partitions/alice/snapshots/{tokens['attempts/alice']}"
        ENV.js("performance.clearResourceTimings();")
        self.assertEqual(ENV.js("const r = await fetch(args[0], { headers: { Authorization: args[1] } }); await r.text(); return r.status;", mine_too, alice), 200)
        self.assertEqual(ENV.js(probe, [mine_too], alice), ["cached 200"])
        ENV.log(clear=True)
        self.assertEqual(ENV.js("const r = await fetch(args[0]); await r.text(); return r.status;", mine_too), 200)
        self.assertEqual([e for e in ENV.log() if e["path"] == mine_too], [])
        # Resource timing (an entry once the body is read): from the network, then from the cache.
        sizes = ENV.wait(lambda: (lambda s: s if len(s) == 2 else None)(ENV.js(transfer_sizes, [mine_too])[0]), "the control's timing entries")
        self.assertTrue(sizes[0] > 0 and sizes[1] == 0, sizes)
        ENV.driver.execute_cdp_cmd("Network.clearBrowserCache", {})

        # Move-out: the views drop the partition; its URLs answer the server's 404, to the
        # user's token and to none, from the network.
        ENV.mode("normal")
        write(membership, method="DELETE")
        for name, report in sync_views().items():
            self.assertEqual(list(report["dropped"]), ["sets/7000"], (name, report))
            self.assertNotIn("sets/7000", report["held"])
        self.assertEqual(databases(), [])
        self.assertEqual({k: "4+4" in v or "5+5" in v for k, v in questions().items()}, {"signed": False, "plain": False})
        ENV.log(clear=True)
        ENV.js("performance.clearResourceTimings();")
        statuses = ENV.js("const out = [];"
                          "for (const url of args[0]) for (const init of [{ headers: { Authorization: args[1] } }, {}]) {"
                          "  const r = await fetch(url, init); await r.text(); out.push(r.status); }"
                          "return out;", urls[:3], alice)
        self.assertEqual(statuses, [404] * 6)
        asked = [(e["path"], e["status"]) for e in ENV.log()]
        self.assertEqual(sorted(asked), sorted((url, 404) for url in urls[:3] for _ in range(2)), asked)
        sizes = ENV.wait(lambda: (lambda s: s if all(len(x) == 2 for x in s) else None)(ENV.js(transfer_sizes, urls[:3])), "the timing entries")
        self.assertTrue(all(min(s) > 0 for s in sizes), sizes)
        ENV.js("for (const v of Object.values(window.views)) v.close();")

    # -- files (attachments, PROTOCOL.md §12) ------------------------------------------------

    MAKE_FILE = """
        const [size, seed] = args;
        const bytes = new Uint8Array(size); let x = seed;
        for (let i = 0; i < size; i += 4) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; bytes[i] = x; bytes[i + 1] = x >> 8; bytes[i + 2] = x >> 16; bytes[i + 3] = x >> 24; }
        const file = new Blob([bytes]);
    """

    def expected_file(self, size, seed):
        """The bytes MAKE_FILE makes in the page (the same xorshift), for the server-side check."""
        out = bytearray(size)
        x = seed
        for i in range(0, size, 4):
            x ^= (x << 13) & 0xFFFFFFFF; x ^= x >> 17; x ^= (x << 5) & 0xFFFFFFFF
            out[i:i + 4] = x.to_bytes(4, "little")[: min(4, size - i)]
        return bytes(out)

    def test_14_a_200_mib_file_attached_offline_resumes_from_the_servers_offset_after_a_reload(self):
        size = 200 << 20
        ENV.mode("offline")
        query = f"collection=notes&db=e2e-files-big&sync=0&token={ENV.notes_jwt}"
        ENV.harness(query)
        ref = ENV.js(self.MAKE_FILE + """
            const ref = await window.replica.attach(file, "application/octet-stream");
            await window.replica.put("big", { title: "Big", file: ref });
            const offline = await window.replica.sync({ waits: "none" });
            if (offline.push.accepted !== 0) throw new Error("pushed while offline");
            return ref;""", size, 2463534242)
        self.assertEqual(ref["size"], size)
        states = ENV.js("return await window.replica.attachmentStatuses();")
        self.assertEqual([s["state"] for s in states], ["pending-upload"])
        ENV.proxy_state(clear=True)
        ENV.mode("slow-uploads")
        ENV.js("window.replica.sync({ waits: 'none' }); return null;")
        ENV.wait(lambda: ENV.proxy_state()["uploaded"] >= size // 2, "half of the file sent", timeout=60)
        ENV.driver.refresh()   # the page goes mid-part; the upload's Location is in IndexedDB
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready"))
        ENV.mode("normal")
        result = ENV.js("return await window.replica.sync({ waits: 'none' });")
        self.assertEqual(result["push"]["accepted"], 1, result)
        sent = ENV.proxy_state()["uploaded"]
        self.assertLessEqual(sent, size * 1.1, f"sent {sent} bytes for a {size}-byte file")
        self.assertGreater(result["attachments"]["uploadedBytes"], 0)
        self.assertLess(result["attachments"]["uploadedBytes"], size * 0.6, "the reloaded page sent only the rest")
        self.assertEqual(ENV.server_record_in("notes", "big")["file"], ref)
        status, _, body = http_bytes("GET", f"{ENV.server_url}/v1/collections/notes/attachments/{ref['$attachment']}", timeout=60)
        self.assertEqual(status, 200)
        self.assertEqual(hashlib.sha256(body).hexdigest(), ref["$attachment"])
        self.assertEqual(body[:4096], self.expected_file(4096, 2463534242))
        self.assertEqual(ENV.js("return (await window.replica.pendingWrites()).length;"), 0)

    def test_15_two_tabs_one_uploads_the_other_shows_progress_and_takes_over(self):
        size = 48 << 20
        query = f"collection=notes&db=e2e-files-tabs&poll=0&token={ENV.notes_jwt}"
        ENV.harness(query)
        first = ENV.driver.current_window_handle
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "the first tab to lead")
        ENV.driver.switch_to.new_window("tab")
        ENV.harness(query)
        second = ENV.driver.current_window_handle
        self.assertFalse(ENV.js("return window.replica.isSyncingTab;"))
        ENV.proxy_state(clear=True)
        ENV.mode("slow-uploads")
        ref = ENV.js(self.MAKE_FILE + """
            const ref = await window.replica.attach(file, "image/png");
            await window.replica.put("tabs", { title: "Two tabs", photo: ref });
            return ref;""", size, 88172645)
        # The write was made here; the leading tab uploads it, and this one sees the progress.
        ENV.wait(lambda: any(p["direction"] == "upload" and 0 < p["done"] < size for p in ENV.js("return window.progress;")),
                 "upload progress shown in the other tab", timeout=60)
        ENV.driver.switch_to.window(first)
        ENV.driver.close()
        ENV.driver.switch_to.window(second)
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "the second tab to take over")
        ENV.mode("normal")
        ENV.wait(lambda: ENV.js("return (await window.replica.pendingWrites()).length === 0;"), "the write to land", timeout=90)
        self.assertEqual(ENV.server_record_in("notes", "tabs")["photo"], ref)
        self.assertLessEqual(ENV.proxy_state()["uploaded"], size * 1.1 + (8 << 20))

    def test_16_lazy_files_a_flipped_byte_and_another_users_file(self):
        refs = [ENV.put_file("/v1/collections/notes", self.expected_file(30_000 + i, 1000 + i)) for i in range(3)]
        for i, ref in enumerate(refs):
            http("PUT", f"{ENV.server_url}/v1/collections/notes/records/lazy{i}", json.dumps({"title": f"Lazy {i}", "photo": ref}).encode(),
                 {"Authorization": f"Bearer {ADMIN}"})
        ENV.harness("collection=notes&db=e2e-files-lazy&sync=0&attachments=lazy")
        ENV.log(clear=True)
        ENV.js("await window.replica.sync({ waits: 'none' }); return null;")
        gets = lambda: [e for e in ENV.log() if "/attachments/" in e["path"] and e["method"] == "GET"]
        self.assertEqual(gets(), [], "opening the list downloads no file")
        shown = ENV.js("""
            const note = await window.replica.get("lazy1");
            const url = await window.replica.attachmentURL(note.photo);
            const again = await window.replica.attachmentURL(note.photo);
            const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
            const hash = [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");
            return { same: url === again, hash };""")
        self.assertTrue(shown["same"])
        self.assertEqual(shown["hash"], refs[1]["$attachment"])
        self.assertEqual([e["path"].rsplit("/", 1)[1] for e in gets()], [refs[1]["$attachment"]], f"exactly its file, once: {gets()}")

        ENV.log(clear=True)
        ENV.mode("flip-attachment")
        flipped = ENV.js("""
            const note = await window.replica.get("lazy2");
            const bytes = new Uint8Array(await (await window.replica.attachment(note.photo)).arrayBuffer());
            return [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");""")
        self.assertEqual(flipped, refs[2]["$attachment"], "the damaged copy was refused and fetched again")
        self.assertEqual([e.get("damaged", False) for e in gets()], [True, False], gets())

        # A download cut halfway: what arrived is kept; the next try asks for the rest only.
        big = ENV.put_file("/v1/collections/notes", self.expected_file(4 << 20, 4242))
        http("PUT", f"{ENV.server_url}/v1/collections/notes/records/bigcut", json.dumps({"title": "Big", "photo": big}).encode(),
             {"Authorization": f"Bearer {ADMIN}"})
        ENV.js("await window.replica.sync({ waits: 'none' }); return null;")
        ENV.log(clear=True)
        ENV.mode("cut-attachment")
        cut = ENV.js("""
            const note = await window.replica.get("bigcut");
            try { await window.replica.attachment(note.photo); return "read"; } catch (e) { return e.code; }""")
        self.assertEqual(cut, "attachment_failed", gets())
        resumed = ENV.js("""
            const note = await window.replica.get("bigcut");
            const bytes = new Uint8Array(await (await window.replica.attachment(note.photo)).arrayBuffer());
            return [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");""")
        self.assertEqual(resumed, big["$attachment"])
        first, *rest = gets()
        self.assertEqual(first["cut"], big["size"] // 2)
        # The next request asks from what the page kept of the half that arrived.
        starts = [int(e["range"][6:].split("-")[0]) for e in rest if e["range"]]
        self.assertTrue(starts and 0 < starts[0] <= first["cut"], rest)

        # Alice's partition file, asked for with Bob's token: the server's 404, nothing kept.
        ref = ENV.put_file("/v1/collections/attempts/partitions/alice", self.expected_file(5000, 77))
        http("PUT", f"{ENV.server_url}/v1/collections/attempts/partitions/alice/records/p1", json.dumps({"score": 1, "photo": ref}).encode(),
             {"Authorization": f"Bearer {ADMIN}"})
        ENV.harness(f"collection=attempts/alice&db=e2e-files-bob&sync=0&attachments=lazy&token={ENV.tokens['bob']}")
        refused = ENV.js("try { await window.replica.attachment(arguments[0]); return 'read'; } catch (e) { return e.code; }", ref)
        self.assertEqual(refused, "attachment_unavailable")
        self.assertEqual(ENV.js("return (await window.replica.attachmentStatuses()).length;"), 0)

        # Bob knows the hash of Alice's file, not its bytes: his page refuses to name it in his
        # own partition before anything is queued (PROTOCOL §12.2), and the server refuses a
        # push that names it exactly as a file it does not hold.
        ENV.harness(f"collection=attempts/bob&db=e2e-files-bob-own&sync=0&attachments=lazy&token={ENV.tokens['bob']}")
        named = ENV.js("try { await window.replica.put('b1', { photo: arguments[0] }); return 'queued'; } catch (e) { return e.code; }", ref)
        self.assertEqual(named, "missing_attachment")
        self.assertEqual(ENV.js("return (await window.replica.pendingWrites()).length;"), 0)
        push = {"client": "e2e-bob", "mutations": [{"seq": 1, "op": "put", "id": "b1", "value": {"photo": ref}}]}
        status, _, body = http_bytes("POST", f"{ENV.server_url}/v1/collections/attempts/partitions/bob/mutations", json.dumps(push).encode(),
                                     {"Authorization": f"Bearer {ENV.tokens['bob']}", "Content-Type": "application/json"})
        self.assertEqual(status, 200)
        self.assertIn(b'"missing_attachment"', body)

    def test_17_the_notes_example_opens_offline_from_its_service_worker_with_its_photos(self):
        # On the server's own origin: nothing else answers there once the server is stopped.
        page = f"{ENV.server_url}/notes.html?collection=album&db=e2e-notes&poll=0&token={ENV.notes_jwt}"
        ENV.driver.get(page)
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready"))
        ENV.js("""
            for (const [title, hue] of [["Beach", 200], ["Forest", 120], ["Sunset", 20]]) {
              const canvas = new OffscreenCanvas(320, 200);
              const g = canvas.getContext("2d");
              const sky = g.createLinearGradient(0, 0, 0, 200);
              sky.addColorStop(0, `hsl(${hue}, 70%, 75%)`); sky.addColorStop(1, `hsl(${hue}, 60%, 35%)`);
              g.fillStyle = sky; g.fillRect(0, 0, 320, 200);
              g.fillStyle = `hsl(${(hue + 180) % 360}, 80%, 60%)`; g.beginPath(); g.arc(240, 60, 30, 0, 7); g.fill();
              await window.addNote(title, await canvas.convertToBlob({ type: "image/png" }));
            }
            await window.replica.sync({ waits: "none" });
            return null;""")
        ENV.wait(lambda: ENV.js("return (await window.replica.pendingWrites()).length === 0;"), "the notes to be pushed")
        self.assertEqual(len([r for r in [ENV.server_record_in("album", n["id"]) for n in ENV.js("return await window.replica.all();")] if r and "photo" in r]), 3)
        ENV.wait(lambda: ENV.js("return !!navigator.serviceWorker.controller || (await navigator.serviceWorker.ready, location.reload(), false);"),
                 "the service worker to control the page")
        WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready"))
        ENV.stop_server()
        try:
            ENV.driver.get(page)
            WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready"))
            ENV.wait(lambda: ENV.js("""return [...document.querySelectorAll('#notes img')].filter((i) => i.complete && i.naturalWidth > 0).length === 3;"""),
                     "the three photos shown offline")
            titles = ENV.js("return [...document.querySelectorAll('#notes .title')].map((e) => e.textContent).sort();")
            self.assertEqual(titles, ["Beach", "Forest", "Sunset"])
            os.makedirs(ARTIFACTS, exist_ok=True)
            ENV.driver.save_screenshot(os.path.join(ARTIFACTS, "notes-offline.png"))
        finally:
            ENV.start_server()

    def test_13_live_mode_applies_a_commit_within_moments(self):
        """Live mode: a replica's syncing tab and a view wait on /v1/index?wait=; a commit lands without polling."""
        ENV.log(clear=True)
        ENV.open("db=live&poll=0&live=1&wait=20")
        held = lambda: [e for e in ENV.log() if e["path"] == "/v1/index" and "wait=20" in (e.get("query") or "")]
        ENV.wait(held, "the first live round")
        time.sleep(0.5)  # the next request now waits on the server
        ENV.admin("PUT", "AD", {"name": "Andorra (live)", "alpha3": "AND"})
        started = time.time()
        ENV.wait(lambda: ENV.js("return (await window.replica.get('AD')).name;") == "Andorra (live)", "the commit applied live", timeout=10)
        took = time.time() - started
        print(f"\n    commit → applied in the browser, live: {took * 1000:.0f} ms", file=sys.stderr)
        self.assertLess(took, 5)
        self.assertGreaterEqual(len(held()), 2, ENV.log())
        # No poll of the collection before the index said it changed: one pull, after it.
        pulls = [e for e in ENV.log() if e["path"] == "/v1/collections/countries"]
        self.assertLessEqual(len(pulls), 2, pulls)

        # A view in live mode, open in two tabs: one tab waits on the server, and both see a
        # commit to one of her partitions; closing that tab hands live mode over.
        def open_live_view():
            ENV.driver.get(f"{ENV.url}/harness.html?db=view-live&sync=0")
            WebDriverWait(ENV.driver, WAIT).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
            ENV.js("const { DeltaSnapView } = await import('./deltasnap.js');"
                   "window.liveView = await DeltaSnapView.open({ accessToken: args[0], databasePrefix: 'e2e-live' });"
                   "window.liveChanges = 0; window.liveView.addEventListener('change', () => window.liveChanges++);"
                   "await window.liveView.sync(); window.liveView.startLive({ wait: 20 });", ENV.tokens["alice"])

        def commit(record_id):
            status, _, text = http("PUT", f"{ENV.server_url}/v1/collections/attempts/partitions/alice/records/{record_id}",
                                   json.dumps({"score": 7}).encode(), {"Authorization": f"Bearer {ADMIN}"})
            self.assertEqual(status, 200, text)

        def has(record_id):
            return record_id in ENV.js("return (await window.liveView.query('attempts')).map((r) => r.id);")

        open_live_view()
        ENV.wait(lambda: ENV.js("return window.liveView.isLiveTab;"), "tab A to run the view's live mode")
        tab_a = ENV.driver.current_window_handle
        ENV.driver.switch_to.new_window("tab")
        tab_b = ENV.driver.current_window_handle
        open_live_view()
        time.sleep(0.5)
        self.assertFalse(ENV.js("return window.liveView.isLiveTab;"), "one tab waits on the server, not two")
        commit("live1")
        ENV.wait(lambda: has("live1"), "tab B to see the live tab's pull", timeout=10)
        self.assertGreaterEqual(ENV.js("return window.liveChanges;"), 1)
        ENV.driver.switch_to.window(tab_a)
        self.assertTrue(has("live1"))
        ENV.driver.close()
        ENV.driver.switch_to.window(tab_b)
        ENV.wait(lambda: ENV.js("return window.liveView.isLiveTab;"), "tab B to take live mode over")
        commit("live2")
        ENV.wait(lambda: has("live2"), "tab B to pull live by itself", timeout=10)
        ENV.js("window.liveView.close();")

    def test_18_watchers_are_told_once_per_change_of_their_result_in_every_tab(self):
        """A live query in two tabs: none for unrelated changes, one per pull that changes it, one for a write, one for its rollback."""
        install = ("const { ReplicaQuery } = await import('./deltasnap.js');"
                   "window.replica.createIndex('name'); window.watched = [];"
                   "window.replica.watch(new ReplicaQuery().filter('name', '=', 'Watchland'),"
                   " (records) => window.watched.push({ at: Date.now(), rows: records.map((r) => r.id + ':' + (r.capital ?? '')) }));"
                   "await window.replica.settled();")
        watched = lambda: ENV.js("await window.replica.settled(); return window.watched.map((w) => w.rows);")
        ENV.open(f"db=watch&poll=0&token={ENV.jwt}")
        ENV.wait(lambda: ENV.js("return window.replica.isSyncingTab;"), "tab A to lead")
        ENV.js(install)
        tab_a = ENV.driver.current_window_handle
        ENV.driver.switch_to.new_window("tab")
        tab_b = ENV.driver.current_window_handle
        ENV.open(f"db=watch&poll=0&token={ENV.jwt}", first_sync=False)
        ENV.js(install)
        self.assertEqual(watched(), [[]])
        ENV.driver.switch_to.window(tab_a)
        self.assertEqual(watched(), [[]])
        reruns = ENV.js("return window.replica.liveQueryReruns;")
        # Unrelated: a pull of another record re-runs nothing and tells no one.
        ENV.admin("PUT", "AD", {"name": "Andorra (watch)", "alpha3": "AND"})
        ENV.sync()
        self.assertEqual(watched(), [[]])
        # One re-run: the page's own list (a live query of every record); none for this watcher.
        self.assertEqual(ENV.js("return window.replica.liveQueryReruns;"), reruns + 1)
        # A pull that changes the result: one call here, one in the other tab.
        ENV.admin("PUT", "WL", {"name": "Watchland"})
        committed = time.time() * 1000
        ENV.sync()
        self.assertEqual(watched(), [[], ["WL:"]])
        print(f"\n    commit → watcher (sync() asked after the commit): {ENV.js('return window.watched[1].at;') - committed:.0f} ms", file=sys.stderr)
        ENV.driver.switch_to.window(tab_b)
        ENV.wait(lambda: len(watched()) == 2, "tab B's watcher to hear tab A's pull")
        self.assertEqual(watched(), [[], ["WL:"]])
        # A local write in tab B: one call in each tab; its push and pull change nothing more.
        ENV.js("await window.replica.patch('WL', { capital: 'Mirror' });")
        self.assertEqual(watched()[2:], [["WL:Mirror"]])
        ENV.driver.switch_to.window(tab_a)
        ENV.wait(lambda: len(watched()) == 3, "tab A's watcher to hear tab B's write")
        ENV.wait(lambda: (ENV.server_record("WL") or {}).get("capital") == "Mirror", "the syncing tab to push it")
        ENV.sync()
        self.assertEqual(watched()[2:], [["WL:Mirror"]])
        # A write the server refuses (the id exists there): one call for it, one for its rollback.
        ENV.admin("PUT", "WX", {"name": "Other"})
        ENV.js("await window.replica.insert('WX', { name: 'Watchland', capital: 'mine' });")
        self.assertEqual(watched()[3:], [["WL:Mirror", "WX:mine"]])
        ENV.sync()
        ENV.wait(lambda: ENV.js("return window.deltasnapLog.some((e) => e.type === 'refused');"), "the refusal")
        self.assertEqual(watched()[3:], [["WL:Mirror", "WX:mine"], ["WL:Mirror"]])
        ENV.driver.switch_to.window(tab_b)
        ENV.wait(lambda: len(watched()) == 5, "tab B to hear the write and the rollback")
        self.assertEqual(watched()[3:], [["WL:Mirror", "WX:mine"], ["WL:Mirror"]])
        ENV.driver.close()
        ENV.driver.switch_to.window(tab_a)
        for record_id in ("WL", "WX"):
            ENV.admin("DELETE", record_id)

if __name__ == "__main__":
    unittest.main(verbosity=2)
