// The live view's page: shows the frame stream in an <img>, polls the
// state, and while this viewer holds the screen sends its mouse and keys.
// No sandbox-controlled text is ever put in as HTML (textContent only).
"use strict";
(function () {
  const id = document.body.dataset.sandbox;
  const base = "/view/" + encodeURIComponent(id);
  const $ = (s) => document.getElementById(s);
  const img = $("screen"), status = $("status"), holder = $("holder");
  const takeBtn = $("takeover"), backBtn = $("handback"), errBox = $("error");
  let mine = false, canTake = false;

  function showError(msg) {
    errBox.hidden = !msg;
    errBox.textContent = msg || "";
  }
  async function call(path, body) {
    const r = await fetch(base + path, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body || {}), credentials: "same-origin",
    });
    if (!r.ok) {
      let msg = r.status + "";
      try { msg = (await r.json()).message || msg; } catch (e) {}
      throw new Error(msg);
    }
    return r.status === 204 ? null : r.json();
  }

  // A token in the fragment (#token=...) becomes this view's cookie, and
  // leaves the address bar.
  async function session() {
    const m = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
    if (!m) return;
    history.replaceState(null, "", location.pathname);
    const r = await fetch(base + "/session", {
      method: "POST", headers: { Authorization: "Bearer " + decodeURIComponent(m[1]) },
      credentials: "same-origin",
    });
    if (!r.ok) showError("the token in the link was refused");
  }

  function stream() {
    img.src = base + "/frames?t=" + Date.now();
  }
  img.addEventListener("error", () => {
    status.textContent = "no picture, retrying…";
    setTimeout(stream, 2000);
  });
  img.addEventListener("load", () => { status.textContent = "live"; });

  async function poll() {
    try {
      const r = await fetch(base + "/state", { credentials: "same-origin" });
      if (r.ok) {
        const st = await r.json();
        canTake = st.can_take_over;
        status.textContent = st.state === "running" ? "live · " + st.screen : st.state;
        holder.textContent = st.held_by ? "held by " + st.held_by : "";
        if (!st.held_by) mine = false;
        document.body.classList.toggle("held", mine);
        takeBtn.hidden = !canTake || !!st.held_by;
        backBtn.hidden = !canTake || !st.held_by;
      } else {
        let msg = "" + r.status;
        try { msg = (await r.json()).message || msg; } catch (e) {}
        showError(msg);
      }
    } catch (e) {}
    setTimeout(poll, 2000);
  }

  takeBtn.addEventListener("click", async () => {
    try { await call("/takeover"); mine = true; showError(""); img.focus(); } catch (e) { showError(e.message); }
    poll1();
  });
  backBtn.addEventListener("click", async () => {
    try { await call("/handback"); mine = false; } catch (e) { showError(e.message); }
    poll1();
  });
  function poll1() {
    fetch(base + "/state", { credentials: "same-origin" }).then((r) => r.ok && r.json()).then((st) => {
      if (!st) return;
      holder.textContent = st.held_by ? "held by " + st.held_by : "";
      takeBtn.hidden = !canTake || !!st.held_by;
      backBtn.hidden = !canTake || !st.held_by;
      document.body.classList.toggle("held", mine && !!st.held_by);
    });
  }

  // Input, in the screen's own pixels.
  function at(ev) {
    const r = img.getBoundingClientRect();
    return {
      x: Math.round((ev.clientX - r.left) * img.naturalWidth / r.width),
      y: Math.round((ev.clientY - r.top) * img.naturalHeight / r.height),
    };
  }
  const buttons = ["left", "middle", "right"];
  function send(ev) {
    if (!mine) return;
    call("/input", ev).catch((e) => showError(e.message));
  }
  let lastMove = 0;
  img.addEventListener("mousedown", (e) => { e.preventDefault(); img.focus(); send(Object.assign({ action: "down", button: buttons[e.button] }, at(e))); });
  img.addEventListener("mouseup", (e) => { e.preventDefault(); send(Object.assign({ action: "up", button: buttons[e.button] }, at(e))); });
  img.addEventListener("mousemove", (e) => {
    const now = Date.now();
    if (now - lastMove < 50) return;
    lastMove = now;
    send(Object.assign({ action: "move" }, at(e)));
  });
  img.addEventListener("contextmenu", (e) => e.preventDefault());
  img.addEventListener("wheel", (e) => {
    if (!mine) return;
    e.preventDefault();
    const dir = Math.abs(e.deltaX) > Math.abs(e.deltaY) ? (e.deltaX > 0 ? "right" : "left") : (e.deltaY > 0 ? "down" : "up");
    send(Object.assign({ action: "scroll", direction: dir, amount: 1 }, at(e)));
  }, { passive: false });

  const keyNames = {
    Enter: "Return", Backspace: "BackSpace", Tab: "Tab", Escape: "Escape", Delete: "Delete",
    ArrowLeft: "Left", ArrowRight: "Right", ArrowUp: "Up", ArrowDown: "Down",
    Home: "Home", End: "End", PageUp: "Page_Up", PageDown: "Page_Down", Insert: "Insert", " ": "space",
  };
  img.addEventListener("keydown", (e) => {
    if (!mine) return;
    if (["Shift", "Control", "Alt", "Meta"].includes(e.key)) return;
    e.preventDefault();
    const mods = (e.ctrlKey ? "ctrl+" : "") + (e.altKey ? "alt+" : "") + (e.metaKey ? "super+" : "");
    if (e.key.length === 1 && !mods) {
      send({ action: "type", text: e.key });
      return;
    }
    let name = keyNames[e.key] || (/^F\d+$/.test(e.key) ? e.key : e.key.length === 1 ? e.key.toLowerCase() : "");
    if (!name) return;
    send({ action: "key", text: mods + (e.shiftKey && e.key.length !== 1 ? "shift+" : "") + name });
  });

  session().finally(() => { stream(); poll(); });
})();
