// The admin page's figures: this instance's /metrics (Prometheus' text
// format), read every 2 seconds and shown as a table of series and value.
// Histogram buckets are left out; their sums and counts stay. The Grafana
// dashboard (deploy/grafana/) shows the same figures summed over instances.
(function () {
  "use strict";
  const table = document.getElementById("figures");
  if (!table) return;

  function rows(text) {
    return text
      .split("\n")
      .filter((line) => line && !line.startsWith("#") && !/_bucket[{ ]/.test(line))
      .map((line) => {
        const cut = line.lastIndexOf(" ");
        return [line.slice(0, cut), line.slice(cut + 1)];
      });
  }

  async function refresh() {
    try {
      const response = await fetch("/metrics", { cache: "no-store" });
      if (!response.ok) return;
      const body = document.createElement("tbody");
      for (const [series, value] of rows(await response.text())) {
        const row = body.insertRow();
        row.insertCell().textContent = series;
        row.insertCell().textContent = value;
      }
      table.replaceChildren(body);
      document.getElementById("figures-read").textContent = new Date().toLocaleTimeString();
    } catch (error) {
      // The instance did not answer: keep the last figures, try again.
    }
  }

  refresh();
  setInterval(refresh, 2000);
})();
