// Shared by the storefront and the control room: the API client, the
// server's clock, tokens, formatting. Plain browser JavaScript, no build.
"use strict";

const seckill = (() => {
  // ---- the server's clock: countdowns never trust the browser's clock.
  let offsetMs = 0;          // server time minus browser time
  let bestRoundTrip = Infinity;
  let dev = false, checkout = false;
  async function syncClock() {
    for (let i = 0; i < 3; i++) {
      const t0 = Date.now();
      const r = await call("GET", "/api/v1/time");
      const t1 = Date.now();
      if (!r.ok) return r;
      dev = !!r.data.dev;
      checkout = !!r.data.checkout;
      const rtt = t1 - t0;
      // The sample with the shortest round trip is the most exact.
      if (rtt <= bestRoundTrip) {
        bestRoundTrip = rtt;
        offsetMs = Date.parse(r.data.now) - (t0 + rtt / 2);
      }
    }
    return { ok: true };
  }
  function now() { return Date.now() + offsetMs; }
  function isDev() { return dev; }
  // viaCheckout: Pay opens the provider's checkout (a provider is configured).
  function viaCheckout() { return checkout; }

  // ---- the API: every answer comes back as {ok, status, data, error}.
  async function call(method, path, opts = {}) {
    const headers = { "Accept": "application/json" };
    if (opts.token) headers["Authorization"] = "Bearer " + opts.token;
    Object.assign(headers, opts.headers || {});
    let body;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
    let res;
    try {
      res = await fetch(path, { method, headers, body, cache: "no-store" });
    } catch (e) {
      return { ok: false, status: 0, error: { code: "NETWORK", message: "the server could not be reached (" + e.message + ")" } };
    }
    let data = null;
    const text = await res.text().catch(() => "");
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    const out = { ok: res.ok, status: res.status, data, retryAfter: Number(res.headers.get("Retry-After")) || 0 };
    if (!res.ok) {
      out.error = (data && data.error) || { code: "HTTP_" + res.status, message: text.slice(0, 200) || res.statusText };
    }
    return out;
  }

  // ---- tokens, kept in this browser only.
  function tokenInfo(token) {
    try {
      const p = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
      return { user: Number(p.sub), role: p.role, exp: p.exp ? p.exp * 1000 : 0 };
    } catch (e) { return null; }
  }
  function loadToken(key) {
    const t = localStorage.getItem(key);
    const info = t && tokenInfo(t);
    if (!info || (info.exp && info.exp < Date.now())) { localStorage.removeItem(key); return null; }
    return t;
  }
  // tokenFromLink takes a token handed over in the link (…#token=JWT, as
  // make run prints it) and removes it from the address bar and history.
  function tokenFromLink() {
    const m = location.hash.match(/^#token=([A-Za-z0-9_.-]+)$/);
    if (!m) return null;
    history.replaceState(null, "", location.pathname + location.search);
    return m[1];
  }
  async function devToken(user, role) {
    return call("POST", "/api/v1/dev/token", { body: { user_id: user, role } });
  }

  // ---- formatting.
  function duration(ms) {
    if (ms < 0) ms = 0;
    const s = Math.ceil(ms / 1000), h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), r = s % 60;
    if (h > 0) return `${h} h ${String(m).padStart(2, "0")} min ${String(r).padStart(2, "0")} s`;
    if (m > 0) return `${m} min ${String(r).padStart(2, "0")} s`;
    return `${r} s`;
  }
  // ---- money: amounts are integers of the currency's minor unit.
  // exponent is the currency's number of decimals (ISO 4217): 0 for the
  // zero-decimal currencies as the providers take them (provider.FormatAmount's
  // list, Stripe's), 3 for the three-decimal ones, 2 for every other code.
  const zeroDecimal = "BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split(" ");
  const threeDecimal = "BHD IQD JOD KWD LYD OMR TND".split(" ");
  function exponent(currency) {
    return zeroDecimal.includes(currency) ? 0 : threeDecimal.includes(currency) ? 3 : 2;
  }
  // currencies: the codes the control room's price field knows, most used first.
  const currencies = ["EUR", "USD", "GBP", "CHF", "JPY", "SEK", "NOK", "DKK", "PLN", "CZK", "HUF", "CAD", "AUD",
    "NZD", "SGD", "HKD", "CNY", "INR", "KRW", "BRL", "MXN", "ZAR", "TRY", "AED", "SAR", "ILS", "THB", "VND", "CLP",
    "KWD", "BHD", "OMR", "JOD", "TND", "IQD", "LYD"];
  // money writes minor units as the checkout pages do (provider.FormatAmount):
  // 999 EUR is "9.99 EUR", 500 JPY "500 JPY", 9999 KWD "9.999 KWD"; exact
  // (string digits, no float division).
  function money(amount, currency) {
    const e = exponent(currency), digits = String(Math.abs(amount)).padStart(e + 1, "0");
    const n = (amount < 0 ? "-" : "") + (e ? digits.slice(0, -e) + "." + digits.slice(-e) : digits);
    return currency ? `${n} ${currency}` : n;
  }

  // parsePrice reads a price as a person writes it — "9.99", "9,99",
  // "9.99 EUR", "EUR 9.99", "€9.99", "1 234,50", "1,234.50", "1.234,50" —
  // into the currency's minor units, exactly: the digits are read as a
  // string, never through a float. A code in the text names the currency,
  // else it is fallback. Answers {ok: true, minor, currency, text} or
  // {ok: false, error} with the error in words.
  const symbols = { "€": "EUR", "£": "GBP" };
  function parsePrice(input, fallback) {
    const refuse = error => ({ ok: false, error });
    let s = String(input === undefined || input === null ? "" : input).replace(/[\s\u00a0\u202f\u2009]+/g, " ").trim();
    if (s === "") return refuse("Write a price, such as 9.99.");
    let currency = "";
    const lead = s.match(/^([A-Za-z]{3})(?![A-Za-z])\s*(.*)$/), trail = !lead && s.match(/^(.*?)(?<![A-Za-z])\s*([A-Za-z]{3})$/);
    if (lead) [currency, s] = [lead[1], lead[2]];
    else if (trail) [s, currency] = [trail[1], trail[2]];
    else if (symbols[s[0]]) [currency, s] = [symbols[s[0]], s.slice(1)];
    else if (symbols[s[s.length - 1]]) [currency, s] = [symbols[s[s.length - 1]], s.slice(0, -1)];
    currency = currency.toUpperCase();
    s = s.trim();
    if (s === "") return refuse(`“${input}” is not a price: write an amount, such as 9.99 ${currencies.includes(currency) ? currency : fallback || "EUR"}.`);
    if (currency && !currencies.includes(currency)) {
      return refuse(`${currency} is not a currency this form knows; write one of ${currencies.join(", ")}.`);
    }
    currency = currency || fallback || "EUR";
    if (/^[-\u2212]/.test(s)) return refuse("A price cannot be negative.");
    if (/^[$¥]|[$¥]$/.test(s)) return refuse("Write the currency's code (USD, CAD, JPY, …) rather than its sign.");
    if (!/^[0-9.,][0-9 .,']*$/.test(s) || !/[0-9]$/.test(s)) {
      return refuse(`“${input}” is not a price: write digits, with a decimal point or comma, such as 9.99 or 9,99 ${currency}.`);
    }
    const e = exponent(currency);
    // The decimal separator: the last of "." and "," when both are written
    // (1,234.50 / 1.234,50); a lone one unless it groups thousands.
    let whole = s, frac = "";
    const lastDot = s.lastIndexOf("."), lastComma = s.lastIndexOf(",");
    const dec = lastDot >= 0 && lastComma >= 0 ? (lastDot > lastComma ? "." : ",")
      : lastDot >= 0 ? "." : lastComma >= 0 ? "," : "";
    if (dec && s.split(dec).length === 2) {
      const after = s.slice(s.lastIndexOf(dec) + 1);
      const both = lastDot >= 0 && lastComma >= 0;
      if (!both && /^[0-9]{3}$/.test(after) && e !== 3) {
        if (e !== 0) {
          return refuse(`“${s}” is ambiguous: is “${dec}” a decimal point or a thousands separator? ${currency} has ${e} decimals: ` +
            `write ${s.split(dec).join("")} for the whole amount, or at most ${e} decimals.`);
        }
        // JPY has no decimals: 1,000 groups thousands.
      } else {
        whole = s.slice(0, s.lastIndexOf(dec));
        frac = after;
      }
    }
    if (!/^[0-9]*$/.test(frac)) return refuse(`“${s}”: the decimals must be digits only.`);
    // The whole part: digits, or groups of three after the first, split by
    // one kind of separator (a space, an apostrophe, or the other mark).
    const seps = new Set(whole.replace(/[0-9]/g, ""));
    if (seps.size > 1) return refuse(`“${s}”: use one thousands separator, or none.`);
    if (seps.size === 1) {
      const [sep] = seps;
      const groups = whole.split(sep);
      if (!/^[0-9]{1,3}$/.test(groups[0]) || groups.slice(1).some(g => !/^[0-9]{3}$/.test(g))) {
        return refuse(`“${s}”: thousands are grouped by three digits (1 234 567,50 or 1,234,567.50).`);
      }
      whole = groups.join("");
    }
    if (whole === "" && frac === "") return refuse(`“${input}” is not a price.`);
    if (frac.length > e && /[1-9]/.test(frac.slice(e))) {
      return refuse(e === 0 ? `${currency} has no decimals: write a whole amount, such as ${whole || "0"} ${currency}.`
        : `${currency} has ${e} decimals: “${s}” has ${frac.length}.`);
    }
    const digits = ((whole || "0") + frac.slice(0, e).padEnd(e, "0")).replace(/^0+(?=[0-9])/, "");
    const minor = BigInt(digits);
    if (minor > BigInt(Number.MAX_SAFE_INTEGER)) return refuse(`“${s}” is too large a price.`);
    return { ok: true, minor: Number(minor), currency, text: money(Number(minor), currency) };
  }

  function when(iso) { return iso ? new Date(iso).toLocaleString() : "—"; }
  function errorText(r) { return r.error ? `${r.error.message} (${r.error.code}${r.status ? ", HTTP " + r.status : ""})` : ""; }

  // el("button", {class: "x", onclick: f}, "text", child...) builds DOM without HTML strings.
  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else if (k === "class") n.className = v;
      else if (v === true) n.setAttribute(k, "");
      else n.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return n;
  }
  function say(node, cls, ...content) {
    node.className = "msg" + (cls ? " " + cls : "");
    node.replaceChildren(...content.flat().map(c => c instanceof Node ? c : document.createTextNode(String(c))));
  }

  // ---- sign-in, the same on both pages: the #signin section (a token
  // pasted, or in development one the server mints) and the #who corner.
  // o: role ("admin" or "buyer"), label and placeholder (the token field's),
  // needs (the refusal of another role's token), devUser (the development
  // sign-in's fixed user; 0 lets the buyer choose), who(info) (the corner's
  // words), changed(token) (after each sign-in and sign-out).
  function signInPanel(o) {
    const $ = id => document.getElementById(id);
    const key = `seckill.${o.role}.token`;
    let token = loadToken(key);
    const msg = el("p", { id: "signin-msg", class: "msg", role: "status" });
    const field = el("input", { id: "token", name: "token", autocomplete: "off", spellcheck: "false", placeholder: o.placeholder, size: "40" });
    const devUser = o.devUser ? null : el("input", { id: "dev-user", name: "dev-user", type: "number", min: "1", max: "1000000000", value: "1001", inputmode: "numeric" });
    const devButton = el("button", { type: "submit", id: "dev-signin" },
      devUser ? `Sign in as ${o.role} ${devUser.value}` : `Sign in as ${o.role} ${o.devUser} (development)`);
    const devForm = el("form", { id: "dev-form", class: "row", hidden: true, onsubmit: async e => {
      e.preventDefault();
      const r = await devToken(devUser ? Number(devUser.value) : o.devUser, o.role);
      if (!r.ok) { say(msg, "bad", "Development sign-in refused: " + errorText(r)); return; }
      signIn(r.data.token, " (development sign-in)");
    } }, devUser && el("label", { for: "dev-user" }, "Buyer number (development)"), devUser, devButton);
    if (devUser) devUser.addEventListener("input", () => { devButton.textContent = `Sign in as ${o.role} ${devUser.value || "N"}`; });
    $("signin").replaceChildren(
      el("h2", { id: "signin-h" }, "Sign in"),
      el("form", { id: "token-form", class: "row", onsubmit: e => { e.preventDefault(); signIn(field.value.trim(), ""); field.value = ""; } },
        el("label", { for: "token" }, o.label), field, el("button", { type: "submit" }, "Sign in")),
      devForm, msg);
    const switchText = el("p", { id: "link-signin-text" });
    const switchYes = el("button", { type: "submit", value: "yes", id: "link-signin-yes", class: "danger" });
    const switchNo = el("button", { type: "submit", value: "no", id: "link-signin-no", class: "secondary", autofocus: true });
    const switchDialog = el("dialog", { id: "link-signin", "aria-labelledby": "link-signin-h" },
      el("form", { method: "dialog" }, el("h2", { id: "link-signin-h" }, "Switch sign-in?"), switchText,
        el("div", { class: "row" }, switchYes, switchNo)));
    document.body.append(switchDialog);

    function render() {
      const info = token && tokenInfo(token);
      if (info) {
        $("who").replaceChildren(o.who(info) + " ",
          el("button", { type: "button", class: "secondary", id: "signout", onclick: signOut }, "Sign out"));
      } else {
        $("who").textContent = "Not signed in";
      }
      $("signin").hidden = !!info;
    }
    function signIn(t, how) {
      const info = tokenInfo(t);
      if (!info || !info.user) { say(msg, "bad", "That is not a token (expected three dot-separated parts)."); return; }
      if (info.role !== o.role) { say(msg, "bad", `That token is for the ${info.role} role; ${o.needs}.`); return; }
      token = t;
      localStorage.setItem(key, t);
      say(msg, "ok", `Signed in as ${o.role} ${info.user}${how}.`);
      render();
      o.changed(token);
    }
    function signOut() {
      token = null;
      localStorage.removeItem(key);
      say(msg, "", "");
      render();
      o.changed(token);
    }
    // askSwitch asks whether the link's sign-in (next) replaces the current
    // one (cur); resolves true only on yes (Escape keeps the current one).
    function askSwitch(cur, next) {
      switchText.textContent = `This link signs you in as ${o.role} ${next.user}; you are signed in as ${o.role} ${cur.user}. ` +
        "Switch only if you asked for this link: anything you do next is done as the link's user.";
      switchYes.textContent = `Switch to ${o.role} ${next.user}`;
      switchNo.textContent = `Stay ${o.role} ${cur.user}`;
      switchDialog.returnValue = "";
      return new Promise(resolve => {
        switchDialog.addEventListener("close", () => resolve(switchDialog.returnValue === "yes"), { once: true });
        switchDialog.showModal();
      });
    }
    // start takes a token handed over in the link, shows who is signed in,
    // reads the server's clock (a failure is said in clockMsg) and offers
    // the development sign-in where the server allows it. A link's token
    // replaces another sign-in only if the person says so: any site can
    // link here, and one that signed its visitors in as its own user (login
    // CSRF) would own whatever they buy and pay for next.
    async function start(clockMsg) {
      const linked = tokenFromLink();
      const cur = token && tokenInfo(token), next = linked && tokenInfo(linked);
      const keep = linked && cur && linked !== token && next && next.role === o.role && !(await askSwitch(cur, next));
      if (linked && !keep) signIn(linked, " (from the link)");
      render();
      const c = await syncClock();
      if (!c.ok) say(clockMsg || msg, "bad", "The server's clock could not be read: " + errorText(c));
      devForm.hidden = !isDev();
    }
    return { token, start, signOut };
  }

  return { syncClock, now, isDev, viaCheckout, call, tokenInfo, loadToken, tokenFromLink, devToken, duration, money, exponent, currencies, parsePrice, when, errorText, el, say, signInPanel };
})();
