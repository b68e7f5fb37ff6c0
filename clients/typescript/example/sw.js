// The notes example's service worker: keeps the page's own files (the app shell) so the page
// opens with the network off after its first visit. The data is not its business: records
// live in IndexedDB and photos in OPFS, kept by the DeltaSnap client, whose /v1/ requests
// pass through untouched.
const CACHE = "deltasnap-notes-shell-v1";
const SHELL = ["notes.html", "notes.js", "example.css", "deltasnap.js", "download-worker.js"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((names) => Promise.all(names.filter((n) => n.startsWith("deltasnap-notes-shell-") && n !== CACHE).map((n) => caches.delete(n))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== location.origin || url.pathname.startsWith("/v1/")) return;
  // Network first (a new version is picked up at once), the cached shell when it fails.
  event.respondWith(fetch(event.request).then((response) => {
    if (response.ok) {
      const copy = response.clone();
      caches.open(CACHE).then((cache) => cache.put(url.pathname === "/" ? "notes.html" : event.request, copy));
    }
    return response;
  }).catch(async () => (await caches.match(event.request, { ignoreSearch: true })) ?? Response.error()));
});
