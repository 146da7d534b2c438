// Sluice dashboard: refreshes the live part of the page, counts down
// expiries, and asks before state-changing actions. No build step.
"use strict";
(function () {
  var live = document.getElementById("live");
  var status = document.getElementById("status"); // answers to actions
  var updated = document.getElementById("updated"); // when the live part was refreshed
  var dialog = document.getElementById("confirm");
  var busy = false;
  var drawn = null; // the live part's fragment as last drawn

  function say(text) {
    if (!status) return;
    status.hidden = false;
    status.textContent = text;
  }

  function stamp(text) {
    if (updated) updated.textContent = text;
  }

  function fragmentURL() {
    var u = new URL(window.location.href);
    u.searchParams.set("fragment", "1");
    return u.toString();
  }

  function refresh() {
    if (!live || busy || document.hidden || (dialog && dialog.open)) return Promise.resolve();
    busy = true;
    return fetch(fragmentURL(), { headers: { Accept: "text/html" }, cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        // Redraw only what changed: an unchanged fragment keeps its nodes,
        // so a click, a hover or a selection on them is not lost.
        if (html !== drawn) {
          drawn = html;
          var focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("#live") ? document.activeElement : null;
          var focusKey = focused ? (focused.id || focused.getAttribute("action") || focused.textContent) : null;
          live.innerHTML = html;
          if (focusKey) restoreFocus(focusKey);
        }
        var now = new Date();
        stamp("Updated " + now.toISOString().replace("T", " ").slice(0, 19) + "Z; refreshes every " + live.dataset.refresh + " ms.");
        countdown();
      })
      .catch(function (e) {
        stamp("Could not refresh (" + e.message + "); retrying.");
      })
      .finally(function () {
        busy = false;
      });
  }

  function restoreFocus(key) {
    var els = live.querySelectorAll("a, button, [tabindex]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var k = el.id || (el.form && el.form.getAttribute("action")) || el.textContent;
      if (k === key) {
        el.focus();
        return;
      }
    }
  }

  function countdown() {
    var els = document.querySelectorAll("[data-until]");
    var now = Date.now();
    for (var i = 0; i < els.length; i++) {
      var t = Date.parse(els[i].getAttribute("data-until"));
      if (isNaN(t)) continue;
      var s = Math.round((t - now) / 1000);
      els[i].textContent = s > 0 ? s + " s" : "expired";
    }
  }

  // Ask before an action; post it with confirm=yes; say the answer.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.matches || !form.matches("form[data-confirm]")) return;
    ev.preventDefault();
    if (!dialog || typeof dialog.showModal !== "function") return;
    if (status) {
      status.hidden = true;
      status.textContent = "";
    }
    document.getElementById("confirm-text").textContent = form.getAttribute("data-confirm");
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue !== "ok") {
        say("Cancelled.");
        return;
      }
      var body = new URLSearchParams(new FormData(form));
      body.set("confirm", "yes");
      fetch(form.getAttribute("action"), { method: "POST", body: body, headers: { Accept: "application/json" } })
        .then(function (r) {
          return r.json().catch(function () {
            return { ok: false, message: "HTTP " + r.status };
          });
        })
        .then(function (res) {
          say((res.ok ? "Done: " : "Failed: ") + res.message);
          return refresh();
        })
        .catch(function (e) {
          say("Failed: " + e.message);
        });
    };
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });

  if (live) {
    var every = parseInt(live.dataset.refresh, 10) || 5000;
    setInterval(refresh, every);
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) refresh();
    });
  }
  setInterval(countdown, 1000);
  countdown();
})();
