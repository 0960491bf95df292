// The explorer page: asks the app backend (/api/...) and draws its answers.
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function getJson(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    for (const v of [].concat(value)) if (v !== "" && v !== undefined) query.append(key, v);
  }
  const response = await fetch(`${path}?${query}`);
  const body = await response.json();
  if (!response.ok) throw body;
  return body;
}

function explanation(item) {
  const e = item.explanation;
  const details = el("details", { class: "why" }, el("summary", {}, "why"));
  if (!e) {
    details.append(el("div", { class: "explanation" }, "no explanation in this answer"));
    return details;
  }
  const rows = [
    ["stage", e.stage],
    ["retrieval rank", e.retrieval_rank < 0 ? "-" : `#${e.retrieval_rank + 1}`],
    ["retrieval score", e.retrieval_score.toFixed(4)],
    ["ranker score", e.ranker_score.toFixed(4)],
    ["affinity", e.affinity.toFixed(4)],
  ];
  const grid = el("div", { class: "explanation" });
  for (const [name, value] of rows) grid.append(el("span", {}, name), el("b", {}, String(value)));
  details.append(grid);
  return details;
}

function itemRow(item, maxScore, withSimilar) {
  const width = maxScore > 0 ? Math.max(2, (100 * item.score) / maxScore) : 0;
  const row = el("div", { class: "item-row" },
    el("span", { class: "title" }, item.title || item.item_id, " ",
      el("span", { class: "cats" }, item.categories.join(", "))),
    el("span", { class: "score" }, item.score.toFixed(4)));
  if (withSimilar) {
    row.append(el("button", { class: "similar-button", onclick: () => similar(item) }, "similar"));
  }
  return el("li", { class: "item", "data-item-id": item.item_id }, row,
    el("div", { class: "bar", style: `width:${width}%` }), explanation(item));
}

function waterfall(timings) {
  const box = $("waterfall");
  box.replaceChildren();
  if (!timings.length) return;
  const total = timings.reduce((sum, t) => sum + t.duration_ms, 0) || 1;
  let offset = 0;
  box.append(el("div", {}, `stage timings (${total.toFixed(1)} ms in all, in order)`));
  for (const t of timings) {
    const bar = el("span", {
      style: `left:${(100 * offset) / total}%;width:${Math.max(0.5, (100 * t.duration_ms) / total)}%`,
    });
    box.append(el("div", { class: "stage" }, el("span", {}, t.stage),
      el("div", { class: "lane" }, bar), el("span", {}, `${t.duration_ms.toFixed(2)} ms`)));
    offset += t.duration_ms;
  }
}

function describe(answer) {
  const text = ` model ${answer.model_version || "-"} · ${answer.elapsed_ms} ms`;
  if (!answer.degraded) return [text];
  return [el("span", { class: "degraded-mark" }, `degraded: ${answer.degraded_reason}`), text];
}

function showDegraded(answer) {
  const box = $("degraded");
  box.hidden = !answer.degraded;
  box.replaceChildren();
  if (answer.degraded) {
    box.append(el("span", { class: "degraded-mark" }, "degraded"), " ",
      `reason ${answer.degraded_reason}`,
      answer.fallback_source ? ` · items from ${answer.fallback_source}` : "");
  }
}

function showError(error) {
  const box = $("error");
  box.hidden = !error;
  box.textContent = error ? `${error.code}: ${error.error}` : "";
}

async function history(userId) {
  const body = await getJson("/api/history", { user_id: userId });
  const list = $("history");
  list.replaceChildren();
  if (!body.available) list.append(el("li", {}, "history not configured (--data-dir)"));
  else if (!body.items.length) list.append(el("li", {}, "no history: a new user"));
  for (const item of body.items) {
    list.append(el("li", { class: "history-item" }, item.title, " ",
      el("span", { class: "cats" }, item.categories.join(", "))));
  }
}

async function recommend() {
  const userId = $("user").value.trim();
  const categories = $("categories").value.split(",").map((c) => c.trim()).filter(Boolean);
  history(userId).catch(() => {});
  try {
    const answer = await getJson("/api/recommend", {
      user_id: userId, k: $("k").value, debug: $("debug").checked,
      category: categories, attributes: $("attributes").value.trim(),
    });
    showError(null);
    showDegraded(answer);
    $("meta").replaceChildren(...describe(answer));
    waterfall(answer.stage_timings);
    const max = Math.max(0, ...answer.items.map((i) => i.score));
    $("items").replaceChildren(...answer.items.map((i) => itemRow(i, max, true)));
    compareVersions(userId).catch(() => { $("rollout-panel").hidden = true; });
  } catch (error) {
    showError(error);
    $("items").replaceChildren();
  }
}

// During a model rollout: the user's list from each version, side by side;
// items only one version has are marked.
async function compareVersions(userId) {
  const rollout = await getJson("/api/rollout", {});
  $("rollout-panel").hidden = !rollout.active;
  if (!rollout.active) return;
  $("rollout-title").textContent =
    `${rollout.status}, ${rollout.share_percent}% of users on the candidate`;
  const sides = [["stable", rollout.stable], ["candidate", rollout.candidate]];
  const answers = [];
  for (const [, version] of sides) {  // one after the other: two at once may be shed
    answers.push(await getJson("/api/recommend",
      { user_id: userId, k: $("k").value, model_version: version }));
  }
  const ids = answers.map((a) => new Set(a.items.map((i) => i.item_id)));
  sides.forEach(([side, version], n) => {
    $(`${side}-version`).replaceChildren(version, " ", ...describe(answers[n]));
    const max = Math.max(0, ...answers[n].items.map((i) => i.score));
    $(`${side}-items`).replaceChildren(...answers[n].items.map((i) => {
      const row = itemRow(i, max, false);
      if (!ids[1 - n].has(i.item_id)) row.classList.add("only-here");
      return row;
    }));
  });
}

async function similar(item) {
  $("similar-panel").hidden = false;
  $("similar-title").textContent = item.title || item.item_id;
  try {
    const answer = await getJson("/api/similar", {
      item_id: item.item_id, user_id: $("user").value.trim(), k: 10, debug: $("debug").checked,
    });
    $("similar-meta").replaceChildren(...describe(answer));
    const max = Math.max(0, ...answer.items.map((i) => i.score));
    $("similar").replaceChildren(...answer.items.map((i) => itemRow(i, max, false)));
  } catch (error) {
    $("similar-meta").textContent = `${error.code}: ${error.error}`;
  }
}

$("ask").addEventListener("submit", (event) => { event.preventDefault(); recommend(); });
getJson("/api/config", {}).then((c) => { $("target").textContent = `recserve at ${c.target}`; });
const initial = new URLSearchParams(location.search).get("user");
if (initial) $("user").value = initial;
recommend();
