// Stockade console: follows /events on the approvals page and keeps the list current.
// Pages are rendered on the server (with each person's own forms and CSRF token); this
// script only inserts new approvals, turns answered ones into a line saying who answered,
// and marks approvals whose deadline passed. No inline script anywhere (CSP 'self').
"use strict";

(function () {
  if (document.body.dataset.page !== "approvals") return;
  const list = document.getElementById("approvals");
  const empty = document.getElementById("empty");
  const answered = document.getElementById("answered-list");
  const live = document.getElementById("live");

  function refreshEmpty() {
    empty.hidden = list.querySelector("article.approval") !== null;
  }

  function describe(state, resolver) {
    if (state === "expired") return "timed out: nobody answered in time (denied)";
    const verb = state === "allowed" ? "allowed" : state === "denied" ? "denied" : state;
    return verb + " by " + (resolver || "another resolver");
  }

  function settle(id, state, resolver, tool) {
    const card = document.getElementById("approval-" + id);
    const li = document.createElement("li");
    li.dataset.approval = id;
    li.className = "state-" + state;
    li.textContent = (tool || "approval") + " " + id + ": " + describe(state, resolver);
    answered.prepend(li);
    if (card) card.remove();
    refreshEmpty();
  }

  function tickDeadlines() {
    const now = Date.now();
    for (const card of list.querySelectorAll("article.approval[data-expires]")) {
      const at = Date.parse(card.dataset.expires);
      if (!Number.isNaN(at) && at <= now) {
        settle(card.dataset.approval, "expired", "", card.querySelector(".tool")?.textContent);
      }
    }
  }

  function connect() {
    const source = new EventSource("/events");
    source.addEventListener("open", function () {
      live.textContent = "live";
      live.classList.add("on");
    });
    source.addEventListener("error", function () {
      // EventSource reconnects by itself; the page says so meanwhile.
      live.textContent = "reconnecting…";
      live.classList.remove("on");
    });
    source.addEventListener("approval", function (event) {
      const change = JSON.parse(event.data);
      if (change.state === "pending") {
        if (!document.getElementById("approval-" + change.id)) {
          const holder = document.createElement("div");
          holder.innerHTML = change.html; // rendered and escaped by the server
          const card = holder.firstElementChild;
          if (card) list.append(card);
        }
      } else {
        settle(change.id, change.state, change.resolver, change.tool);
      }
      refreshEmpty();
    });
  }

  connect();
  setInterval(tickDeadlines, 1000);
})();
