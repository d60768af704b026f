// The control room: every sale's live figures (GET /api/v1/admin/summary,
// polled twice a second; the server reads them at most twice a second
// whatever the number of open rooms), each sale's chart over time, its books
// against the provider's own ledger on demand, and the sale controls, each
// confirmed.
"use strict";

(() => {
  const S = seckill, $ = id => document.getElementById(id);
  const cards = new Map();
  const STATUSES = ["QUEUED", "PENDING_PAYMENT", "PAID", "CANCELLED", "FAILED", "REFUNDED"];

  // ------------------------------------------------------------ sign-in
  const signin = S.signInPanel({ role: "admin", label: "Admin token", placeholder: "paste an admin token",
    needs: "the control room needs an admin token", devUser: 1, who: info => `Admin ${info.user}`,
    changed: t => { token = t; $("room").hidden = !t; } });
  let token = signin.token;

  // ------------------------------------------------------------ confirmation
  // confirmAction shows the dialog; resolves true only on "Yes".
  function confirmAction(text, yes) {
    const d = $("confirm");
    $("confirm-text").textContent = text;
    $("confirm-yes").textContent = yes;
    d.returnValue = "";
    return new Promise(resolve => {
      d.addEventListener("close", () => resolve(d.returnValue === "yes"), { once: true });
      d.showModal();
    });
  }

  // ------------------------------------------------------------ create
  // The price is read as a person writes it ("9.99", "9,99 EUR", "EUR
  // 1 234,50") into the currency's minor units, exactly (seckill.parsePrice);
  // a code written in it picks the currency. The API takes price_cents.
  const currencyField = $("c-currency");
  currencyField.replaceChildren(...S.currencies.map(c => S.el("option", { value: c }, `${c} (${S.exponent(c)} decimals)`)));
  currencyField.value = "EUR";
  function readPrice() {
    const p = S.parsePrice($("c-price").value, currencyField.value);
    if (p.ok && p.currency !== currencyField.value) currencyField.value = p.currency;
    $("c-price").setAttribute("aria-invalid", String(!p.ok));
    $("c-price-says").className = p.ok ? "muted" : "muted bad";
    $("c-price-says").textContent = p.ok ? `${p.text} (${p.minor} in minor units)` : "Not a price: see below.";
    $("c-price-msg").textContent = p.ok ? "" : "Price: " + p.error;
    return p;
  }
  $("c-price").addEventListener("input", readPrice);
  currencyField.addEventListener("change", readPrice);
  readPrice();

  $("create-form").addEventListener("submit", async e => {
    e.preventDefault();
    const price = readPrice();
    if (!price.ok) {
      S.say($("create-msg"), "bad", "Not created: the price cannot be read; the line above says why.");
      $("c-price").focus();
      return;
    }
    const start = new Date(S.now() + Number($("c-start").value) * 1000);
    const end = new Date(start.getTime() + Number($("c-minutes").value) * 60000);
    const body = {
      name: $("c-name").value, price_cents: price.minor, currency: price.currency, stock_total: Number($("c-units").value),
      start_at: start.toISOString(), end_at: end.toISOString(), payment_timeout_seconds: Number($("c-window").value),
    };
    const ok = await confirmAction(`Create "${body.name}": ${body.stock_total} units at ${price.text}, ` +
      `from ${start.toLocaleTimeString()} to ${end.toLocaleString()}, ${body.payment_timeout_seconds} s to pay?`, "Create the sale");
    if (!ok) { S.say($("create-msg"), "", "Nothing created."); return; }
    const r = await S.call("POST", "/api/v1/items", { token, body });
    if (r.ok) S.say($("create-msg"), "ok", `Sale ${r.data.id} created: "${r.data.name}", ${r.data.stock_total} units at ${S.money(r.data.price_cents, r.data.currency)}.`);
    else S.say($("create-msg"), "bad", "Not created: " + S.errorText(r));
  });

  // ------------------------------------------------------------ sales
  function fig(label, id) {
    const dd = S.el("dd", { id });
    return [S.el("div", {}, S.el("dt", {}, label), dd), dd];
  }
  function card(s) {
    const id = s.item.id;
    let c = cards.get(id);
    if (c) return c;
    const r = {};
    const figs = [];
    const add = (label, key) => { const [box, dd] = fig(label, `s${id}-${key}`); r[key] = dd; figs.push(box); };
    add("Units left (Redis)", "left");
    add("Accepted (202)", "accepted");
    STATUSES.forEach(st => add(st.replace("_", " "), st));
    add("202 → first pay p50", "p50");
    add("202 → first pay p99", "p99");
    add("Outbox backlog", "outbox");
    add("Captured", "captured");
    add("Refunded", "refunded");
    add("Refunds pending", "pending");
    const root = S.el("article", { class: "card", id: `sale-${id}`, "aria-labelledby": `sale-${id}-name` },
      r.name = S.el("h3", { id: `sale-${id}-name` }),
      S.el("div", { class: "row" }, r.badge = S.el("span", { class: "badge", id: `sale-${id}-state` }), r.window = S.el("span", { class: "muted" })),
      S.el("dl", { class: "figs" }, figs),
      r.chart = S.el("figure", { class: "chart", id: `s${id}-chart` }),
      S.el("div", { class: "row" },
        r.sagas = S.el("a", { id: `sale-${id}-sagas`, target: "_blank", rel: "noopener" }, "Sagas in the Temporal UI"),
        r.check = S.el("button", { type: "button", class: "secondary", id: `books-${id}`, hidden: true, onclick: () => checkBooks(id) },
          "Check against the provider")),
      r.books = S.el("div", { class: "books", id: `s${id}-books`, "aria-live": "polite" }),
      S.el("div", { class: "row" },
        r.end = S.el("button", { type: "button", class: "danger", id: `end-${id}`, onclick: () => endSale(id) }, "End now…")),
      S.el("form", { class: "row", onsubmit: e => { e.preventDefault(); addUnits(id); } },
        S.el("label", { for: `add-${id}` }, "Units to add"),
        r.add = S.el("input", { id: `add-${id}`, type: "number", min: "1", max: "1000000", value: "100", inputmode: "numeric" }),
        S.el("button", { type: "submit", class: "secondary", id: `add-${id}-go` }, "Add units…")),
      r.msg = S.el("p", { class: "msg", id: `sale-${id}-msg`, role: "status" }));
    c = { root, r, name: "" };
    cards.set(id, c);
    return c;
  }
  const ms = v => v === null || v === undefined ? "—" : v >= 10000 ? (v / 1000).toFixed(1) + " s" : Math.round(v) + " ms";

  function paint(b) {
    const order = [];
    for (const s of b.sales) {
      const c = card(s), r = c.r, it = s.item;
      c.name = it.name;
      r.name.textContent = `#${it.id} ${it.name}`;
      r.badge.textContent = it.status;
      r.badge.className = "badge " + it.status;
      r.window.textContent = `${S.when(it.start_at)} → ${S.when(it.end_at)} · ${it.stock_total} units · ${S.money(it.price_cents, it.currency)}`;
      r.left.textContent = s.units_left === null ? "not loaded" : s.units_left;
      r.accepted.textContent = s.accepted;
      STATUSES.forEach(st => { r[st].textContent = (s.orders && s.orders[st]) || 0; });
      r.p50.textContent = ms(s.payable.p50_ms);
      r.p99.textContent = ms(s.payable.p99_ms) + (s.payable.count ? ` (${s.payable.count})` : "");
      r.outbox.textContent = s.outbox_backlog;
      const sums = key => (s.money || []).map(m => S.money(m[key], m.currency)).join(" · ") || "—";
      r.captured.textContent = sums("captured");
      r.refunded.textContent = sums("refunded");
      r.pending.textContent = sums("refunds_pending");
      if (s.sagas_url) { r.sagas.href = s.sagas_url; r.sagas.hidden = false; } else r.sagas.hidden = true;
      r.check.hidden = !S.viaCheckout(); // door: no provider ledger to read
      r.end.disabled = it.status === "ENDED";
      order.push(c.root);
    }
    const seen = new Set(b.sales.map(s => s.item.id));
    for (const [id] of cards) if (!seen.has(id)) cards.delete(id);
    // Keep focus where it is: only re-append when the list itself changed.
    const box = $("sales");
    if (box.children.length !== order.length || order.some((n, i) => box.children[i] !== n)) box.replaceChildren(...order);
    if (b.sales.length === 0) S.say($("sales-msg"), "", "No sales in the last hour. Create one above.");
    if (b.temporal_ui) { $("temporal-link").href = b.temporal_ui; $("temporal-link").hidden = false; }
  }

  // ------------------------------------------------------------ chart
  // Each sale over time (GET /api/v1/admin/series, polled every 2 s): the
  // orders accepted, paid and refunded per bucket since the start, drawn as
  // three lines of an inline SVG.
  const LINES = [["accepted", "accepted"], ["paid", "paid"], ["refunded", "refunded"]];
  function svg(tag, attrs, ...children) {
    const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    n.append(...children);
    return n;
  }
  function draw(c, s) {
    const W = 300, H = 80, n = s.accepted.length;
    const top = Math.max(1, ...LINES.flatMap(([k]) => s[k]));
    const x = i => (n > 1 ? i * W / (n - 1) : W).toFixed(1), y = v => (H - v * (H - 2) / top).toFixed(1);
    const total = k => s[k].reduce((a, b) => a + b, 0);
    const per = s.step_seconds === 1 ? "per second" : `per ${s.step_seconds} s`;
    const said = LINES.map(([k, w]) => `${total(k)} ${w}`).join(", ");
    c.r.chart.replaceChildren(
      svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-labelledby": `s${s.item_id}-chart-cap` },
        svg("line", { class: "axis", x1: 0, y1: H, x2: W, y2: H }),
        ...LINES.map(([k]) => svg("polyline", { class: "line " + k, "data-points": n,
          points: s[k].map((v, i) => `${x(i)},${y(v)}`).join(" ") }))),
      S.el("figcaption", { id: `s${s.item_id}-chart-cap`, class: "muted" },
        ...LINES.map(([k, w]) => S.el("span", { class: "key " + k }, w)),
        ` ${per} since the start (${S.duration((n - 1) * s.step_seconds * 1000)}; peak ${top}): ${said}.`));
  }
  async function pollSeries() {
    if (token) {
      const r = await S.call("GET", "/api/v1/admin/series", { token });
      if (r.ok) for (const s of r.data.sales) { const c = cards.get(s.item_id); if (c) draw(c, s); }
    }
    setTimeout(pollSeries, 2000);
  }

  let last = null;
  async function poll() {
    if (token) {
      const r = await S.call("GET", "/api/v1/admin/summary", { token });
      if (r.ok) {
        last = r.data;
        S.say($("sales-msg"), "", "");
        paint(r.data);
      } else {
        S.say($("sales-msg"), "bad", "The figures could not be read: " + S.errorText(r));
        if (r.status === 401 || r.status === 403) signin.signOut();
      }
    }
    setTimeout(poll, 500);
  }
  setInterval(() => {
    if (!last) return;
    const age = S.now() - Date.parse(last.read_at);
    $("freshness").textContent = `Figures read at ${new Date(Date.parse(last.read_at)).toLocaleTimeString()} (server clock), ${S.duration(age)} ago.`;
  }, 250);

  // control sends a sale control with an Idempotency-Key of its own (one per
  // click) and repeats it with the same key while the answer is lost or says
  // "try again": the server applies it once, and answers a repeat with the
  // first result.
  async function control(path, body) {
    const key = idempotencyKey();
    let r;
    for (let attempt = 1; ; attempt++) {
      r = await S.call("POST", path, { token, body, headers: { "Idempotency-Key": key } });
      const again = r.status === 0 || r.status === 502 || r.status === 503 || r.status === 504;
      if (!again || attempt === 3) return r;
      await new Promise((done) => setTimeout(done, 500 * attempt));
    }
  }
  function idempotencyKey() {
    if (window.crypto && crypto.randomUUID) return "room-" + crypto.randomUUID();
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return "room-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  async function endSale(id) {
    const c = cards.get(id);
    const ok = await confirmAction(`End sale #${id} "${c.name}" now? New purchases are refused at once; orders already accepted go on.`, "End the sale now");
    if (!ok) { S.say(c.r.msg, "", "Not ended."); return; }
    const r = await control(`/api/v1/items/${id}/end`);
    if (r.ok) S.say(c.r.msg, "ok", `Sale ended at ${S.when(r.data.end_at)}.`);
    else S.say(c.r.msg, "bad", "Not ended: " + S.errorText(r));
  }
  async function addUnits(id) {
    const c = cards.get(id);
    const n = Number(c.r.add.value);
    const ok = await confirmAction(`Add ${n} units to sale #${id} "${c.name}"?`, `Add ${n} units`);
    if (!ok) { S.say(c.r.msg, "", "Nothing added."); return; }
    const r = await control(`/api/v1/items/${id}/stock`, { add: n });
    if (r.ok) S.say(c.r.msg, "ok", `Added ${n} units: ${r.data.stock_left} of ${r.data.stock_total} left.`);
    else S.say(c.r.msg, "bad", "Not added: " + S.errorText(r));
  }

  // ------------------------------------------------------------ books
  // checkBooks asks the sale's books against the provider's own ledger (GET
  // /api/v1/admin/items/:id/books): up to 100 provider calls, so on this
  // button only, never on a poll. Ours and the provider's per currency, the
  // payments read, and each problem with its order.
  async function checkBooks(id) {
    const c = cards.get(id);
    c.r.check.disabled = true;
    c.r.books.replaceChildren(S.el("p", { class: "msg", role: "status" }, "Reading the provider's records…"));
    const r = await S.call("GET", `/api/v1/admin/items/${id}/books`, { token });
    c.r.check.disabled = false;
    if (!r.ok) {
      c.r.books.replaceChildren(S.el("p", { class: "msg bad", id: `s${id}-books-msg` }, "The books could not be checked: " + S.errorText(r)));
      return;
    }
    c.r.books.replaceChildren(...booksView(r.data));
  }
  const FIGURES = [["captured", "Captured"], ["refunded", "Refunded"], ["refunds_pending", "Refunds pending"]];
  const PROVIDERS = { stripe: "Stripe", testpay: "the test provider" };
  function booksView(b) {
    const id = b.item_id, partial = b.provider_read < b.payments;
    const byCur = list => new Map((list || []).map(m => [m.currency, m]));
    const ours = byCur(b.money_read), theirs = byCur(b.provider_money), whole = byCur(b.money);
    const curs = [...new Set([...ours.keys(), ...theirs.keys(), ...(partial ? whole.keys() : [])])].sort();
    const cell = (m, cur, key, side, differs) => S.el("td", { id: `s${id}-books-${cur}-${key}-${side}`, class: differs ? "differs" : null },
      S.money(m ? m[key] : 0, cur));
    const rows = curs.flatMap(cur => FIGURES.map(([key, label]) => {
      const o = ours.get(cur), t = theirs.get(cur), differs = (o ? o[key] : 0) !== (t ? t[key] : 0);
      return S.el("tr", {}, S.el("th", { scope: "row" }, `${label} (${cur})`), cell(o, cur, key, "ours", differs),
        cell(t, cur, key, "provider", differs), partial ? cell(whole.get(cur), cur, key, "whole", false) : null);
    }));
    const who = PROVIDERS[b.provider] || b.provider;
    const read = `${b.provider_read} of ${b.payments} payment${b.payments === 1 ? "" : "s"} read at ${who}` +
      (partial ? ` (at most ${b.budget} a check: the figures compare those)` : "") + `, ${new Date(b.read_at).toLocaleTimeString()}.`;
    const out = [S.el("p", { class: "muted", id: `s${id}-books-read` }, b.provider === "door" ? "No payment provider (door): our books only." : read)];
    if (curs.length) {
      out.push(S.el("table", { class: "books", id: `s${id}-books-table` },
        S.el("caption", { class: "visually-hidden" }, "Our books and the provider's, per currency"),
        S.el("thead", {}, S.el("tr", {}, S.el("td", {}), S.el("th", { scope: "col" }, "Our books"), S.el("th", { scope: "col" }, `${who[0].toUpperCase() + who.slice(1)}'s ledger`),
          partial ? S.el("th", { scope: "col" }, "Ours, whole sale") : null)),
        S.el("tbody", {}, rows)));
    }
    if (b.provider_error) out.push(S.el("p", { class: "msg warn", id: `s${id}-books-error` }, "The provider stopped answering: " + b.provider_error));
    const problems = b.problems || [];
    out.push(problems.length
      ? S.el("ul", { id: `s${id}-books-problems`, class: "msg bad" }, problems.map(p => S.el("li", {}, S.el("code", {}, p.kind),
          p.order_id ? [" order ", S.el("code", {}, p.order_id)] : null, ": ", p.detail)))
      : S.el("p", { class: "msg ok", id: `s${id}-books-problems` },
          b.provider_read ? "No problem: the provider's ledger agrees with our books." : "No problem in our books."));
    return out;
  }

  // ------------------------------------------------------------ find an order
  $("find-form").addEventListener("submit", e => { e.preventDefault(); find($("find-q").value.trim()); });
  async function find(q) {
    const param = /^\d+$/.test(q) ? "buyer_id=" + q : "order_id=" + encodeURIComponent(q);
    const r = await S.call("GET", "/api/v1/admin/orders?" + param, { token });
    if (!r.ok) { S.say($("find-msg"), "bad", "Not read: " + S.errorText(r)); return; }
    const list = r.data.orders || [];
    S.say($("find-msg"), "", list.length ? `${list.length} order${list.length > 1 ? "s" : ""}, newest first.` : "No order found.");
    $("found").replaceChildren(...list.map(foundCard));
  }
  const amount = (n, cur) => S.money(n, cur);
  const link = (href, text) => href ? S.el("a", { href, target: "_blank", rel: "noopener" }, text) : null;
  function foundCard(f) {
    const o = f.order, id = o.order_id;
    const sale = last && last.sales.find(s => s.item.id === o.item_id);
    const msg = S.el("p", { class: "msg", role: "status", id: `found-${id}-msg` });
    return S.el("article", { class: "card", id: `found-${id}` },
      S.el("h3", {}, S.el("code", {}, id), " ", S.el("span", { class: "badge " + o.status, id: `found-${id}-status` }, o.status)),
      S.el("p", { class: "muted" }, `Buyer ${o.user_id} · sale #${o.item_id}${sale ? " " + sale.item.name : ""} · ${S.when(o.created_at)}` +
        (o.reason ? ` · ${o.reason}` : "")),
      S.el("p", {}, f.payments.length ? "Payments:" : "No provider payment (paid at the door, or not paid)."),
      S.el("ul", {}, f.payments.map(p => S.el("li", {}, `${p.provider} `, S.el("code", {}, p.provider_payment_id),
        ` ${p.status} · ${amount(p.amount, p.currency)}`))),
      f.refunds.length ? S.el("p", {}, "Refunds:") : null,
      S.el("ul", { id: `found-${id}-refunds` }, f.refunds.map(r => S.el("li", {}, S.el("code", {}, r.provider_refund_id || "(not confirmed)"),
        ` ${r.status} · ${amount(r.amount, r.currency)} · “${r.reason}” · ${S.when(r.updated_at)}`))),
      S.el("div", { class: "row" }, link(f.saga_url, "Saga in the Temporal UI"), link(f.refund_workflow_url, "Refund in the Temporal UI"),
        f.saga_url ? null : S.el("span", { class: "muted" }, `Saga ${f.saga_id}`),
        f.refundable ? S.el("button", { type: "button", class: "danger", id: `refund-${id}`, onclick: () => refundOrder(f, msg) }, "Refund…") : null),
      msg);
  }
  function askReason(text) {
    const d = $("refund-dialog");
    $("refund-text").textContent = text;
    $("refund-reason").value = "";
    d.returnValue = "";
    return new Promise(resolve => {
      d.addEventListener("close", () => resolve(d.returnValue === "yes" ? $("refund-reason").value.trim() : ""), { once: true });
      d.showModal();
    });
  }
  async function refundOrder(f, msg) {
    const p = f.payments.find(p => p.status === "succeeded");
    const reason = await askReason(`Refund order ${f.order.order_id} of buyer ${f.order.user_id}` +
      (p ? ` (${amount(p.amount, p.currency)} through ${p.provider})` : "") + "? Its unit goes back to the sale.");
    if (!reason) { S.say(msg, "", "Not refunded."); return; }
    const r = await control(`/api/v1/orders/${f.order.order_id}/refund`, { reason });
    if (!r.ok) { S.say(msg, "bad", "Not refunded: " + S.errorText(r)); return; }
    if (r.data.status === "REFUNDED") { S.say(msg, "ok", `Refunded already (refund ${r.data.refund_id}).`); return; }
    S.say(msg, "ok", "Refund started (", r.data.workflow_url ? link(r.data.workflow_url, r.data.workflow_id) : r.data.workflow_id,
      "); Find again to see it REFUNDED.");
  }

  async function start() {
    $("room").hidden = !token;
    await signin.start();
    poll();
    pollSeries();
  }
  start();
})();
