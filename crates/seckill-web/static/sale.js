// The sale page, live: a countdown to the opening, the units left as they
// fall (server-sent events, or polling where those fail), and a Buy button
// that buys without leaving the page and says what happened in words.
// Without this script the page still works: the figures are rendered by the
// server and the Buy button posts a form.
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
    } else if (now() >= endsAt) {
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

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (inFlight) return;
    inFlight = true;
    updateButton();
    say("Buying…", true);
    fetch("/api/sales/" + id + "/purchase", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ user_id: buyer.value.trim() }),
    })
      .then(function (r) { return r.json().then(function (body) { return [r.status, body]; }); })
      .then(function ([status, body]) {
        if (status === 202) {
          say("You got one!", true, body.order_id);
        } else {
          say(words[body.error] || body.message || "Something went wrong. Please try again.", false);
        }
      })
      .catch(function () { say("No answer from the server. Please try again.", false); })
      .finally(function () { inFlight = false; updateButton(); });
  });
})();
