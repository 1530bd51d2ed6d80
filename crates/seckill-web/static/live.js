// The live page for the projector: one snapshot of the sale about ten
// times a second (server-sent events from /api/sales/{id}/live), shown as
// big numbers, and the list of lock holders built here from consecutive
// snapshots: a new fence number in the lock means a new holder.
"use strict";

(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const id = live.dataset.saleId;
  const $ = function (name) { return document.getElementById(name); };
  const connection = $("connection");
  const holders = $("holders");
  // The newest holder shown, and the fence counter of the last snapshot,
  // to tell how many holds passed between two snapshots unseen.
  let lastFence = null;
  let lastCounter = null;
  const KEEP = 100;

  function put(name, value) {
    const element = $(name);
    if (element) element.textContent = value === null || value === undefined ? "—" : String(value);
  }

  function status(name, label, reading) {
    const element = $(name);
    const ok = reading.status === "ok";
    element.textContent = (label ? label + " " : "") + (ok ? "ok" : "unavailable");
    element.className = ok ? "status-live" : "unavailable";
  }

  // A lock's time to live in words: Redis says -1 for a key with no TTL,
  // which is "never", not "just expired" (the article's crash leaves one);
  // the article's lock asks for decades.
  function expires(pttl) {
    if (pttl < 0) return "never (no TTL)";
    const YEAR = 365 * 24 * 3600 * 1000;
    if (pttl >= YEAR) return "in " + Math.floor(pttl / YEAR) + " years";
    if (pttl >= 10000) return "in " + Math.round(pttl / 1000) + " s";
    return "in " + pttl + " ms";
  }

  // Whether this sale's lock was ever seen taken, on this page or by the
  // fence counter: until then, a lock that is not held is "none taken",
  // which is all there is to see of a strategy with no lock (naive, lua,
  // postgres), not "free".
  let everTaken = false;

  function time(ms) {
    const d = new Date(ms);
    const pad = function (n, w) { return String(n).padStart(w, "0"); };
    return pad(d.getHours(), 2) + ":" + pad(d.getMinutes(), 2) + ":" + pad(d.getSeconds(), 2) + "." + pad(d.getMilliseconds(), 3);
  }

  function noteHolder(lock, counter, at) {
    if (!lock || lock.fence === lastFence) return;
    const unseen = lastCounter === null ? 0 : Math.max(0, lock.fence - lastCounter - 1);
    lastFence = lock.fence;
    const item = document.createElement("li");
    if (lock.fence > 0) item.value = lock.fence;
    item.textContent = (lock.fence > 0 ? "fence " + lock.fence : "no fence") + " · " + lock.instance + " · " + time(at) +
      (unseen > 0 ? " (" + unseen + " more before it, unseen)" : "");
    holders.insertBefore(item, holders.firstChild);
    while (holders.children.length > KEEP) holders.removeChild(holders.lastChild);
  }

  function show(board) {
    status("redis-status", "Redis", board.redis);
    status("pg-status", "", board.postgres);
    const redis = board.redis;
    if (redis.status === "ok") {
      const lock = redis.lock;
      everTaken = everTaken || lock !== null || redis.fence > 0;
      put("holder", lock ? lock.instance : everTaken ? "free" : "none taken");
      // A long name (the broken strategies' locks name no instance: the
      // line then quotes the lock's value) gets a smaller size, on one line.
      $("holder").classList.toggle("long", lock !== null && lock.instance.length > 24);
      // The broken strategies' locks carry no fence number.
      put("holder-fence", lock ? (lock.fence > 0 ? lock.fence : "none") : "—");
      put("pttl", lock ? expires(lock.pttl_ms) : "—");
      put("fence", redis.fence);
      noteHolder(lock, lastCounter, board.at_ms);
      lastCounter = redis.fence;
      Object.keys(redis.answers).forEach(function (answer) { put(answer, redis.answers[answer]); });
      put("fenced", redis.fenced);
      // Raw, not clamped at 0: a negative stock is what a broken strategy leaves.
      put("stock", redis.stock === null ? "not loaded" : redis.stock);
      put("buyers", redis.buyers);
      put("waiting", redis.queue.waiting);
      put("in_flight", redis.queue.in_flight);
      put("dead", redis.queue.dead);
    }
    // A sale with a waiting room: who waits, is admitted, left.
    const room = board.room;
    if (room && room.status === "ok") {
      put("room-waiting", room.waiting);
      put("room-active", room.admitted);
      put("room-bought", room.bought);
      put("room-expired", room.expired);
      put("room-abandoned", room.abandoned);
      put("room-rate", room.per_sec === null ? null : room.per_sec.toFixed(1));
      put("room-closed", room.closed ? "closed: sold out or ended" : "open");
    } else if (room) {
      put("room-closed", "unavailable");
    }
    const pg = board.postgres;
    if (pg.status === "ok") {
      put("pg-confirmed", pg.confirmed);
      put("pg-paid", pg.paid);
      put("pg-rejected", pg.rejected);
      put("pg-cancelled", pg.cancelled);
      put("pg-sold", pg.sold);
    }
  }

  if (!window.EventSource) {
    connection.textContent = "This browser cannot show live updates.";
    return;
  }
  const events = new EventSource("/api/sales/" + id + "/live");
  events.addEventListener("snapshot", function (e) {
    connection.textContent = "Live";
    show(JSON.parse(e.data));
  });
  // The browser reconnects by itself; say so meanwhile.
  events.onerror = function () { connection.textContent = "Reconnecting…"; };
})();
