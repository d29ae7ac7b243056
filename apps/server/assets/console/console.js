// Toolhost's console: live updates, decisions without a reload, and keys. Served from the
// server; nothing here is fetched from anywhere else.
(function () {
  "use strict";
  var meta = document.querySelector('meta[name="csrf-token"]');
  var csrf = meta ? meta.getAttribute("content") : "";
  var live = document.getElementById("live");

  function say(text) {
    if (live) { live.textContent = text; }
  }

  // Times in the reader's zone.
  function localise(root) {
    root.querySelectorAll("time[data-ms]").forEach(function (el) {
      el.textContent = new Date(Number(el.getAttribute("data-ms"))).toLocaleString();
    });
  }

  function fragment(html) {
    var template = document.createElement("template");
    template.innerHTML = html; // markup the server escaped and rendered
    localise(template.content);
    return template.content;
  }

  function pending() { return document.getElementById("pending"); }

  // How many wait in all (more than a page shows): the server's number, kept up by the events.
  function count(change, total) {
    var list = pending();
    var counter = document.getElementById("waiting-count");
    if (counter) {
      var now = total !== undefined ? total : Math.max(0, Number(counter.textContent) + (change || 0));
      counter.textContent = String(now);
    }
    var none = document.getElementById("none-waiting");
    if (none && list) { none.hidden = !!list.querySelector(".approval"); }
  }

  function byId(id) {
    var list = pending();
    if (!list) { return null; }
    var items = list.querySelectorAll(".approval");
    for (var i = 0; i < items.length; i++) {
      if (items[i].getAttribute("data-approval-id") === id) { return items[i]; }
    }
    return null;
  }

  function removeItem(item) {
    if (!item) { return; }
    var next = item.nextElementSibling || item.previousElementSibling;
    var focused = item.contains(document.activeElement);
    item.remove();
    if (focused && next && next.classList.contains("approval")) { next.focus(); }
  }

  // An approval that stopped waiting (decided here or elsewhere, or its call ended): once.
  var gone = {};
  function settle(id) {
    if (gone[id]) { return; }
    gone[id] = true;
    removeItem(byId(id));
    count(-1);
  }

  function setLive(state, text) {
    document.body.setAttribute("data-live", state);
    var shown = document.getElementById("live-state");
    if (shown) { shown.textContent = text; }
  }

  // What the stream could not have told (before it opened, while it was away): the first page's
  // items as they are now.
  function catchUp() {
    var list = pending();
    if (!list || list.getAttribute("data-page") !== "0") { return; }
    fetch("/console/approvals/waiting", { credentials: "same-origin" }).then(function (response) {
      if (!response.ok) { return null; }
      var total = Number(response.headers.get("x-waiting-total"));
      return response.text().then(function (html) { return { html: html, total: total }; });
    }).then(function (found) {
      if (!found) { return; }
      var fresh = fragment(found.html);
      var ids = {};
      fresh.querySelectorAll(".approval").forEach(function (item) { ids[item.getAttribute("data-approval-id")] = true; });
      list.querySelectorAll(".approval").forEach(function (item) {
        var id = item.getAttribute("data-approval-id");
        if (!ids[id]) { gone[id] = true; removeItem(item); }
      });
      var added = Array.prototype.slice.call(fresh.querySelectorAll(".approval")).filter(function (item) {
        return !byId(item.getAttribute("data-approval-id"));
      });
      added.reverse().forEach(function (item) { list.insertBefore(item, list.firstChild); });
      count(0, found.total);
    });
  }

  // Live: the tenant's events, from every instance.
  var timeline = document.getElementById("timeline");
  var refreshing = null;
  function refreshTimeline() {
    if (refreshing) { return; }
    refreshing = setTimeout(function () {
      refreshing = null;
      fetch("/console/sessions/" + encodeURIComponent(timeline.getAttribute("data-session")) + "/timeline",
        { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) { if (html !== null) { timeline.replaceChildren(fragment(html)); } });
    }, 150);
  }
  var query = timeline ? "?session=" + encodeURIComponent(timeline.getAttribute("data-session")) : "";
  if (window.EventSource && document.body.getAttribute("data-page") !== "login") {
    var source = new EventSource("/console/events" + query);
    setLive("connecting", "Connecting…");
    source.addEventListener("open", function () {
      setLive("on", "Live");
      catchUp();
      if (timeline) { refreshTimeline(); }
    });
    source.addEventListener("error", function () { setLive("off", "Reconnecting…"); });
    source.addEventListener("approval", function (event) {
      var data = JSON.parse(event.data);
      var list = pending();
      if (!list || byId(data.id) || gone[data.id] || list.getAttribute("data-page") !== "0") { return; }
      list.insertBefore(fragment(data.html), list.firstChild);
      count(1);
      say("A call waits for a person.");
    });
    source.addEventListener("decided", function (event) {
      var data = JSON.parse(event.data);
      settle(data.id);
      var decided = document.querySelector("#decided tbody");
      if (decided && data.html) { decided.insertBefore(fragment(data.html), decided.firstChild); }
    });
    source.addEventListener("ended", function (event) {
      var data = JSON.parse(event.data);
      var list = pending();
      if (!list) { return; }
      list.querySelectorAll(".approval").forEach(function (item) {
        if (item.getAttribute("data-session") === data.session && item.getAttribute("data-call") === data.call) {
          settle(item.getAttribute("data-approval-id"));
        }
      });
    });
    source.addEventListener("session", function () {
      if (timeline) { refreshTimeline(); }
    });
    source.addEventListener("stale", function () { window.location.reload(); });
  }

  // Decisions without leaving the page.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("decide")) { return; }
    event.preventDefault();
    var button = event.submitter || form.querySelector('button[data-action="allow-once"]');
    var body = new URLSearchParams(new FormData(form));
    if (button && button.name) { body.set(button.name, button.value); }
    var item = form.closest(".approval");
    form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    // (Not `form.action`: the buttons named "action" shadow it.)
    fetch(form.getAttribute("action"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf, "X-Requested-With": "fetch",
                 "Content-Type": "application/x-www-form-urlencoded" },
      body: body.toString()
    }).then(function (response) {
      if (response.ok) {
        say("Decided.");
        var list = pending();
        if (list && list.getAttribute("data-alone") !== "true") { settle(item.getAttribute("data-approval-id")); }
        return;
      }
      return response.text().then(function (text) {
        form.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
        var error = item.querySelector(".error") || document.createElement("p");
        error.className = "notice error";
        error.setAttribute("role", "alert");
        error.textContent = text || ("Refused (" + response.status + ")");
        form.appendChild(error);
      });
    });
  });

  // Keys, as in the terminal app: j/k move, y once, s session, a always, n deny.
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    var tag = (event.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || tag === "select") { return; }
    var list = pending();
    if (!list) { return; }
    var items = Array.prototype.slice.call(list.querySelectorAll(".approval"));
    if (!items.length) { return; }
    var current = items.indexOf(document.activeElement.closest ? document.activeElement.closest(".approval") : null);
    var actions = { y: "allow-once", s: "allow-session", a: "allow-always", n: "deny" };
    if (event.key === "j" || event.key === "k") {
      var next = event.key === "j" ? current + 1 : current - 1;
      if (current < 0) { next = 0; }
      next = Math.max(0, Math.min(items.length - 1, next));
      items[next].focus();
      items[next].scrollIntoView({ block: "nearest" });
      event.preventDefault();
    } else if (actions[event.key]) {
      var item = items[current < 0 ? 0 : current];
      var button = item.querySelector('button[data-action="' + actions[event.key] + '"]');
      if (button && !button.disabled) { event.preventDefault(); button.click(); }
    }
  });

  // How long each call has waited.
  function ages() {
    var now = Date.now();
    document.querySelectorAll("[data-since]").forEach(function (el) {
      var seconds = Math.max(0, Math.round((now - Number(el.getAttribute("data-since"))) / 1000));
      el.textContent = seconds < 60 ? seconds + " s" : seconds < 3600 ? Math.floor(seconds / 60) + " min"
        : Math.floor(seconds / 3600) + " h " + Math.floor(seconds % 3600 / 60) + " min";
    });
  }
  localise(document);
  setInterval(ages, 5000);
})();
