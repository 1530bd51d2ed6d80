// The order page, live: follows the order's status (pending, confirmed,
// paid or cancelled) by polling the JSON API, counts down the time left to
// pay, and pays without leaving the page. Without this script the page
// still works: reload it, and the Pay button posts a form.
"use strict";

(function () {
  const order = document.getElementById("order");
  if (!order) return;
  const id = order.dataset.orderId;
  const skew = Number(order.dataset.serverNowMs) - Date.now();
  const now = () => Date.now() + skew;
  let payBy = Number(order.dataset.payByMs) || 0;
  let status = order.dataset.status;

  const statusEl = document.getElementById("status");
  const headline = document.getElementById("headline");
  const payment = document.getElementById("payment");
  const timeLeft = document.getElementById("time-left");
  const form = document.getElementById("pay-form");
  const button = document.getElementById("pay");
  const outcome = document.getElementById("pay-outcome");

  const words = {
    pending: "Your unit is reserved, and the order is being recorded.",
    confirmed: "The unit is yours once you pay.",
    paid: "The unit is yours.",
    cancelled: "The payment window closed, and the unit went back on sale.",
    rejected: "This order holds no unit.",
  };
  const final = ["paid", "cancelled", "rejected"];

  function show(o) {
    status = o.status;
    payBy = o.pay_by ? Date.parse(o.pay_by) : 0;
    order.dataset.status = status;
    statusEl.textContent = status;
    headline.textContent = words[status] || "";
    payment.hidden = status !== "confirmed";
    tick();
  }

  function tick() {
    if (status !== "confirmed") return;
    const s = Math.ceil((payBy - now()) / 1000);
    if (s > 0) {
      timeLeft.textContent = s + (s === 1 ? " second" : " seconds") + " left to pay.";
      button.disabled = false;
    } else {
      timeLeft.textContent = "The payment window has closed.";
      button.disabled = true;
    }
  }

  function refresh() {
    if (final.indexOf(status) >= 0) return;
    fetch("/api/orders/" + id, { headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (o) { if (o) show(o); })
      .catch(function () {});
  }
  setInterval(refresh, 1000);
  setInterval(tick, 250);
  tick();

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    button.disabled = true;
    outcome.textContent = "Paying…";
    fetch("/api/orders/" + id + "/pay", { method: "POST", headers: { Accept: "application/json" } })
      .then(function (r) { return r.json().then(function (body) { return [r.status, body]; }); })
      .then(function ([code, body]) {
        if (code === 200) {
          outcome.textContent = "Payment received.";
          show(body);
        } else {
          outcome.textContent = body.message || "The payment failed.";
          refresh();
        }
      })
      .catch(function () { outcome.textContent = "No answer from the server. Please try again."; button.disabled = false; });
  });
})();
