// The sale page, live: a countdown to the opening, the units left as they
// fall (server-sent events, or polling where those fail), and a Buy button
// that buys without leaving the page and says what happened in words. On a
// sale with a waiting room, the buyer's place in line as it moves (its own
// stream), and the Buy form once their turn comes, carrying the admission.
// Without this script the page still works: the figures are rendered by the
// server, the forms post, and a waiting page reloads itself.
"use strict";

(function () {
  const sale = document.getElementById("sale");
  if (!sale) return;
  const id = sale.dataset.saleId;
  const total = Number(sale.dataset.stockTotal);
  const startsAt = Number(sale.dataset.startsAtMs);
  const endsAt = Number(sale.dataset.endsAtMs) || Infinity;
  // Count on the server's clock: the visitor's may be off.
  const skew = Number(sale.dataset.serverNowMs) - Date.now();
  const now = () => Date.now() + skew;

  const left = document.getElementById("stock-left");
  const sold = document.getElementById("sold");
  const countdown = document.getElementById("countdown");
  const button = document.getElementById("buy");
  const form = document.getElementById("buy-form");
  const buyer = document.getElementById("user_id");
  const outcome = document.getElementById("outcome");
  const note = document.getElementById("live-note");
  const admission = document.getElementById("admission");
  let inFlight = false;
  let stockLeft = Number(left.textContent);

  function showStock(n) {
    stockLeft = n;
    left.textContent = String(n);
    sold.textContent = String(total - n);
    updateButton();
  }

  function updateButton() {
    const open = now() >= startsAt && now() < endsAt;
    button.disabled = inFlight || !open || stockLeft <= 0;
    button.textContent = stockLeft <= 0 && open ? "Sold out" : "Buy";
  }

  function tick() {
    const ms = startsAt - now();
    if (ms > 0) {
      const s = Math.ceil(ms / 1000);
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
      const parts = h > 0 ? [h + " h", m + " min", r + " s"] : m > 0 ? [m + " min", r + " s"] : [r + " s"];
      countdown.textContent = "Opens in " + parts.join(" ") + ".";
      countdown.dataset.state = "waiting";
      updateButton();
      return;
    }
    // Open: a lottery's places no longer move back as others join.
    const moves = document.getElementById("room-lottery-moves");
    if (moves) moves.hidden = true;
    if (now() >= endsAt) {
      countdown.textContent = "The sale has ended.";
      countdown.dataset.state = "ended";
    } else {
      // Sold out is not over: a unit whose buyer does not pay in time
      // comes back on sale, and this page shows it when it does.
      countdown.textContent = stockLeft > 0
        ? "The sale is open."
        : "The sale is open, and every unit is taken for now: units whose buyers do not pay in time come back.";
      countdown.dataset.state = "open";
    }
    updateButton();
  }
  tick();
  setInterval(tick, 250);

  // Units left: server-sent events fed by Redis pub/sub; polling the JSON
  // API if the browser has no EventSource or the stream keeps failing.
  let polling = null;
  function poll() {
    if (polling) return;
    note.textContent = "Units left update every two seconds.";
    polling = setInterval(function () {
      fetch("/api/sales/" + id, { headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (s) { if (s) showStock(s.stock_left); })
        .catch(function () {});
    }, 2000);
  }
  if (window.EventSource) {
    const events = new EventSource("/api/sales/" + id + "/events");
    let failures = 0;
    events.addEventListener("stock", function (e) {
      failures = 0;
      showStock(JSON.parse(e.data).stock_left);
    });
    events.onerror = function () {
      failures += 1;
      if (failures >= 3) { events.close(); poll(); }
    };
  } else {
    poll();
  }

  const words = {
    sold_out: "Sold out. Every unit has been taken.",
    already_purchased: "You already have one of these.",
    not_started: "The sale has not started yet.",
    ended: "The sale has ended.",
    busy: "Too busy right now. Please try again.",
    not_admitted: "Your turn is not good for this purchase: join the line again.",
  };

  function say(text, good, orderId) {
    outcome.textContent = text + (orderId ? " " : "");
    outcome.className = "outcome " + (good ? "won" : "lost");
    if (orderId) {
      const link = document.createElement("a");
      link.href = "/orders/" + orderId;
      link.id = "order-link";
      link.textContent = "Follow your order and pay for it.";
      outcome.appendChild(link);
    }
  }

  // What the purchase sends: the buyer, and their admission on a sale
  // with a waiting room.
  function purchase() {
    const body = { user_id: buyer.value.trim() };
    if (admission && admission.value) body.admission = admission.value;
    return body;
  }

  const room = waitingRoom();

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (inFlight) return;
    inFlight = true;
    updateButton();
    say("Buying…", true);
    fetch("/api/sales/" + id + "/purchase", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(purchase()),
    })
      .then(function (r) { return r.json().then(function (body) { return [r.status, body]; }); })
      .then(function ([status, body]) {
        if (status === 202) {
          say("You got one!", true, body.order_id);
          if (room) room.bought();
        } else {
          // A refusal may name the buyer's order (already purchased: a
          // retry whose first answer was lost; unconfirmed): link to it.
          say(words[body.error] || body.message || "Something went wrong. Please try again.", false, body.order_id);
        }
      })
      .catch(function () { say("No answer from the server. Please try again.", false); })
      .finally(function () { inFlight = false; updateButton(); });
  });

  // The waiting room: the page shows one of its parts (join, waiting,
  // admitted, bought, closed) as the server rendered it, and, while there
  // is something to follow, follows the buyer's standing by server-sent
  // events (polling the JSON API where those fail), never reloading.
  function waitingRoom() {
    const section = document.getElementById("room");
    if (!section) return null;
    const parts = {
      outside: ["join-form"],
      waiting: ["room-waiting"],
      admitted: ["room-admitted", "buy-form"],
      bought: ["room-bought"],
      closed: ["room-closed"],
    };
    const text = function (id, value) { document.getElementById(id).textContent = String(value); };
    let admissionEnds = 0;

    function show(state) {
      section.dataset.state = state;
      Object.keys(parts).forEach(function (name) {
        parts[name].forEach(function (id) { document.getElementById(id).hidden = name !== state; });
      });
    }

    function eta(secs) {
      if (secs === null || secs === undefined) return "a moment";
      return secs < 90 ? "about " + Math.ceil(secs) + " s" : "about " + Math.ceil(secs / 60) + " min";
    }

    // Why the line does not move while admitted buyers fill the room: the
    // page's own words (`RoomPanel::full_note`); "" while a place is free.
    function fullNote(active, secs) {
      if (secs === null || secs === undefined) return "";
      return active + (active === 1 ? " buyer" : " buyers") +
        " may buy now, as many as the room lets in at once: the next place opens when " +
        (active === 1 ? "they buy" : "one of them buys") +
        " or their turn runs out, at the latest in " + Math.ceil(secs) + " s.";
    }

    // One standing, as the API's status answers it.
    function standing(s) {
      if (s.bought) {
        show("bought");
      } else if (s.closed) {
        text("room-closed-why", now() >= endsAt ? section.dataset.whyEnded : section.dataset.whySoldOut);
        show("closed");
      } else if (s.admitted) {
        admission.value = s.admission;
        admissionEnds = now() + s.admission_expires_in_secs * 1000;
        tickAdmission();
        show("admitted");
      } else if (s.position) {
        text("room-position", s.position);
        text("room-ahead", s.ahead);
        text("room-count", s.waiting);
        text("room-eta", eta(s.eta_secs));
        const full = document.getElementById("room-full");
        full.textContent = fullNote(s.active, s.full_for_secs);
        full.hidden = full.textContent === "";
        show("waiting");
      } else {
        // Out of the room: an admission that ran out. Join again.
        admission.value = "";
        show("outside");
      }
      // Nothing more will come: bought, out, or the sale ended for good.
      return s.bought || (!s.admitted && !s.position && !s.closed) || (s.closed && now() >= endsAt);
    }

    function tickAdmission() {
      const secs = Math.max(0, Math.ceil((admissionEnds - now()) / 1000));
      text("room-admission-left", secs);
    }
    if (section.dataset.state === "admitted") {
      admissionEnds = now() + Number(section.dataset.admissionLeftSecs) * 1000;
    }
    setInterval(function () { if (section.dataset.state === "admitted") tickAdmission(); }, 250);

    const interval = Number(section.dataset.intervalMs) || 1000;
    let polling = null;
    function pollStanding() {
      if (polling) return;
      polling = setInterval(function () {
        fetch("/api/sales/" + id + "/queue", { headers: { Accept: "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (s) { if (s && standing(s)) clearInterval(polling); })
          .catch(function () {});
      }, interval);
    }
    if (section.dataset.follow === "true") {
      if (window.EventSource) {
        const events = new EventSource("/sales/" + id + "/queue/events");
        let failures = 0;
        events.addEventListener("standing", function (e) {
          failures = 0;
          if (standing(JSON.parse(e.data))) events.close();
        });
        events.onerror = function () {
          failures += 1;
          if (failures >= 3) { events.close(); pollStanding(); }
        };
      } else {
        pollStanding();
      }
    }
    return { bought: function () { show("bought"); } };
  }
})();
