// crucible viewer: hash routes over the JSON API; polls the current view so a running job updates.
"use strict";

const POLL_MS = 1500;
const app = document.getElementById("app");
const crumbs = document.getElementById("crumbs");
const live = document.getElementById("live");
let lastKey = null;
let lastBody = null;
let timer = null;

// Build DOM nodes without innerHTML: trial output is untrusted.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "onclick") el.addEventListener("click", v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const enc = encodeURIComponent;
const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
const secs = (x) => (x === null || x === undefined ? "-" : Number(x).toFixed(1) + " s");
const usd = (x) => (x === null || x === undefined ? "-" : "$" + Number(x).toFixed(4));
const count = (x) => (x === null || x === undefined ? "-" : x >= 1e6 ? (x / 1e6).toFixed(2) + "M" : x >= 1e4 ? (x / 1e3).toFixed(1) + "k" : String(Math.round(x)));
function tokensText(t) {
  if (!t || (t.input === undefined && t.output === undefined)) return "-";
  return `${count(t.input || 0)} in / ${count(t.output || 0)} out`;
}

function badgeClass(outcome, reward, threshold) {
  if (outcome === null || outcome === undefined) return "running";
  if (outcome !== "graded" || reward === null || reward === undefined) return "error";
  if (reward >= threshold) return "pass";
  return reward > 0 ? "partial" : "fail";
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "job" && parts.length === 2) return { view: "job", job: parts[1], api: `/api/jobs/${enc(parts[1])}` };
  if (parts[0] === "job" && parts[2] === "task") return { view: "task", job: parts[1], task: parts[3], api: `/api/jobs/${enc(parts[1])}/tasks/${enc(parts[3])}` };
  if (parts[0] === "job" && parts[2] === "trial") return { view: "trial", job: parts[1], trial: parts[3], api: `/api/jobs/${enc(parts[1])}/trials/${enc(parts[3])}` };
  if (parts[0] === "train" && parts.length === 2) return { view: "train", run: parts[1], api: `/api/train/${enc(parts[1])}` };
  return { view: "jobs", api: "/api/jobs" };
}

function setCrumbs(r, extra) {
  crumbs.replaceChildren();
  crumbs.append(h("a", { href: "#/" }, "jobs"));
  if (r.job) crumbs.append(" / ", h("a", { href: `#/job/${enc(r.job)}` }, r.job));
  if (extra && extra.task) crumbs.append(" / ", h("a", { href: `#/job/${enc(r.job)}/task/${enc(extra.task)}` }, extra.task));
  if (r.trial) crumbs.append(" / ", h("span", {}, r.trial));
}

function card(k, v) {
  return h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));
}

function table(headers, rows, opts) {
  const thead = h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: /^(n|mean|reward|errors|pass|cost|dur|att)/.test(x) ? "num" : null }, x))));
  return h("table", opts || {}, thead, h("tbody", {}, rows));
}

function renderJobs(data) {
  const rows = data.jobs.map((j) =>
    h("tr", { class: "click", dataset: { job: j.job_id }, onclick: () => (location.hash = `#/job/${enc(j.job_id)}`) },
      h("td", {}, h("a", { href: `#/job/${enc(j.job_id)}` }, j.job_id)),
      h("td", {}, j.name || ""),
      h("td", {}, [j.agent, j.model].filter(Boolean).join(" / ")),
      h("td", {}, j.status || "-"),
      h("td", { class: "num" }, `${j.n_done ?? "-"} / ${j.n_planned ?? "-"}`),
      h("td", { class: "num" }, fmt(j.mean_reward)),
      h("td", { class: "num" }, fmt((j.pass_at_k || {})["pass@1"])),
      h("td", {}, Object.entries(j.outcomes || {}).filter(([k]) => k !== "graded").map(([k, v]) => `${k} ${v}`).join(", ")),
      h("td", { class: "muted" }, (j.created_at || "").replace("T", " ").slice(0, 19))));
  return [
    h("h1", {}, "Jobs"),
    h("p", { class: "muted" }, data.jobs_dir),
    rows.length ? table(["job", "name", "agent / model", "status", "trials", "mean", "pass@1", "errors", "created"], rows, { id: "jobs" })
      : h("p", { class: "muted" }, "No jobs yet."),
    ...renderTrainRuns(data.train_runs || []),
  ];
}

function renderTrainRuns(runs) {
  if (!runs.length) return [];
  const rows = runs.map((t) =>
    h("tr", { class: "click", onclick: () => (location.hash = `#/train/${enc(t.run_id)}`) },
      h("td", {}, h("a", { href: `#/train/${enc(t.run_id)}` }, t.run_id)),
      h("td", {}, [t.recipe, t.model].join(" / ")),
      h("td", {}, t.state),
      h("td", { class: "num" }, `${t.step} / ${t.total_steps ?? "-"}`),
      h("td", { class: "num" }, fmt(t.reward_mean))));
  return [h("h2", {}, "Training runs"), table(["run", "recipe / model", "state", "steps", "reward"], rows, { id: "train-runs" })];
}

function renderTrain(data, r) {
  const run = data.run;
  const steps = data.reward_per_step;
  const last = steps.length ? steps[steps.length - 1] : null;
  const comps = [...new Set(steps.flatMap((m) => Object.keys(m.components)))];
  const rows = steps.map((m) => h("tr", {}, h("td", { class: "num" }, String(m.step)), h("td", { class: "num" }, fmt(m.reward_mean)),
    ...comps.map((c) => h("td", { class: "num" }, fmt(m.components[c]))), h("td", { class: "num" }, secs(m.step_time_s))));
  const samples = data.samples.map((s) => h("tr", {}, h("td", { class: "num" }, String(s.step)), h("td", { class: "num" }, fmt(s.reward)),
    h("td", {}, h("pre", {}, s.prompt)), h("td", {}, h("pre", {}, s.response))));
  return [
    h("h1", {}, run.id),
    h("div", { class: "cards", id: "train-cards" }, card("state", run.state), card("recipe", run.recipe), card("model", run.model),
      card("step", `${run.step} / ${run.total_steps ?? "-"}`), card("reward", fmt(last ? last.reward_mean : null))),
    h("img", { id: "train-plot", alt: "reward per step", src: `/api/train/${enc(r.run)}/plot.svg?v=${steps.length}` }),
    table(["step", "reward", ...comps, "dur"], rows, { id: "train-steps" }),
    h("h2", {}, `Samples (latest ${data.samples.length} of ${data.n_samples})`),
    table(["step", "reward", "prompt", "response"], samples, { id: "train-samples" }),
  ];
}

function renderJob(data, r) {
  const m = data.metrics;
  const rs = m.primary ? m.rewards[m.primary] : null;
  const cfg = data.config || {};
  const thr = m.threshold;
  const cards = h("div", { class: "cards", id: "job-cards" },
    card("status", (data.summary || {}).status || "-"),
    card("trials", `${m.n_trials} / ${data.n_planned ?? "-"}`),
    card(`mean ${m.primary || ""}`, rs ? `${fmt(rs.mean)}${rs.se !== null ? " ± " + fmt(rs.se) : ""}` : "-"),
    card("pass@1", fmt(m.pass_k.length ? m.pass_k[0].pass_at_k : null)),
    ...(m.pass_k.length > 1 ? [card(`pass@${m.pass_k.length}`, fmt(m.pass_k[m.pass_k.length - 1].pass_at_k))] : []),
    card("errors", String(m.n_errors)),
    card("tokens / rollout", tokensText(m.cost.tokens_per_rollout)),
    card("cost / rollout", usd(m.cost.per_rollout_usd)),
    card("cost total", usd(m.cost.total_usd)),
    card("mean duration", secs(m.duration.mean_sec)));
  const rows = data.tasks.map((t) =>
    h("tr", { class: "click", dataset: { task: t.task }, onclick: (e) => { if (e.target.tagName !== "A") location.hash = `#/job/${enc(r.job)}/task/${enc(t.task)}`; } },
      h("td", {}, h("a", { href: `#/job/${enc(r.job)}/task/${enc(t.task)}` }, t.task)),
      h("td", { class: "num" }, fmt(t.mean)),
      h("td", { class: "num" }, `${t.successes}/${t.n_scored}`),
      h("td", { class: "num" }, String(t.n_errors)),
      h("td", {}, t.trials.map((tr) => h("a", {
        class: "badge " + badgeClass(tr.outcome, tr.reward, thr),
        href: `#/job/${enc(r.job)}/trial/${enc(tr.folder || tr.trial_name)}`,
        title: `attempt ${tr.attempt}: ${tr.outcome}${tr.reward !== null ? ", reward " + tr.reward : ""}`,
      }, String(tr.attempt))))));
  const out = [
    h("h1", {}, cfg.name || r.job),
    h("p", { class: "muted" }, [cfg.agent, cfg.model, cfg.env].filter(Boolean).join(" · ")),
    cards,
    h("h2", {}, "Tasks"),
    table(["task", "mean", "passed", "errors", "trials"], rows, { id: "tasks" }),
  ];
  if (data.skipped && data.skipped.length) {
    // bad stored records: left out of the numbers above, named so they can be looked at
    out.push(h("h2", { class: "err" }, `Records skipped (${data.skipped.length})`),
      h("ul", { id: "skipped" }, data.skipped.map((s) => h("li", { class: "err" },
        h("a", { href: `#/job/${enc(r.job)}/trial/${enc(s.trial)}` }, s.trial), ": ", s.why))));
  }
  if (data.running.length) {
    out.push(h("h2", {}, `In progress (${data.running.length})`),
      h("ul", { id: "running" }, data.running.map((f) => h("li", {}, h("a", { href: `#/job/${enc(r.job)}/trial/${enc(f)}` }, f)))));
  }
  return out;
}

function renderTask(data, r) {
  const tm = data.metrics;
  const rows = (tm ? tm.trials : []).map((tr) =>
    h("tr", { class: "click", dataset: { trial: tr.folder || tr.trial_name }, onclick: () => (location.hash = `#/job/${enc(r.job)}/trial/${enc(tr.folder || tr.trial_name)}`) },
      h("td", { class: "num" }, String(tr.attempt)),
      h("td", {}, h("a", { href: `#/job/${enc(r.job)}/trial/${enc(tr.folder || tr.trial_name)}` }, tr.folder || tr.trial_name)),
      h("td", {}, tr.outcome),
      h("td", { class: "num" }, fmt(tr.reward)),
      h("td", { class: "num" }, secs(tr.duration_sec)),
      h("td", { class: "num" }, usd(tr.cost_usd)),
      h("td", { class: "err" }, tr.error || tr.agent_error || "")));
  return [
    h("h1", {}, data.task),
    tm ? h("p", {}, `mean ${fmt(tm.mean)} · ${tm.successes}/${tm.n_scored} passed · ${tm.n_errors} errors`) : null,
    h("h2", {}, "Trials"),
    table(["attempt", "trial", "outcome", "reward", "duration", "cost", "error"], rows, { id: "trials" }),
    h("h2", {}, "Instruction"),
    data.instruction ? h("pre", { id: "instruction" }, data.instruction.text) : h("p", { class: "muted" }, "instruction not found"),
  ];
}

function contentText(c) {
  if (c === null || c === undefined) return "";
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p.text ?? JSON.stringify(p, null, 2))).join("\n");
  return JSON.stringify(c, null, 2);
}

// A tool call as a person reads it: a shell command as `$ command` with its real
// line breaks, other arguments one `key: value` a line; never escaped JSON.
function callText(fn) {
  let args = fn.arguments;
  if (typeof args === "string") {
    try { args = JSON.parse(args); } catch (e) { return `${fn.name || "tool"}: ${args}`; }
  }
  const name = fn.name || "tool";
  if (args && typeof args === "object" && typeof args.command === "string") {
    const rest = Object.entries(args).filter(([k]) => k !== "command").map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
    return `${name} $ ${args.command}` + (rest.length ? `\n(${rest.join(", ")})` : "");
  }
  if (args && typeof args === "object") {
    const lines = Object.entries(args).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v, null, 2)}`);
    return lines.length ? `${name}\n${lines.join("\n")}` : `${name}()`;
  }
  return `${name}: ${String(args)}`;
}

function renderTrajectory(t) {
  if (t === null || t === undefined) return null;
  const steps = Array.isArray(t) ? t : (t.messages || t.steps || t.turns || null);
  if (!Array.isArray(steps)) return h("pre", { id: "trajectory" }, JSON.stringify(t, null, 2));
  return h("div", { id: "trajectory" }, steps.map((s, i) => {
    if (typeof s !== "object" || s === null) return h("pre", {}, String(s));
    const role = s.role || s.source || s.type || `step ${i}`;
    const parts = [];
    const text = contentText(s.content ?? s.message ?? s.text ?? null);
    if (text) parts.push(h("pre", {}, text));
    for (const tc of s.tool_calls || []) parts.push(h("pre", { class: "tool-call" }, callText(tc.function || tc)));
    for (const k of ["command", "output", "observation"]) {
      if (s[k] !== undefined) parts.push(h("pre", {}, `${k}: ${contentText(s[k])}`));
    }
    if (!parts.length) parts.push(h("pre", {}, JSON.stringify(s, null, 2)));
    return h("div", { class: `msg role-${role}` }, h("div", { class: "role" }, role), parts);
  }));
}

// An ATIF trajectory (agent/trajectory.atif.json, or converted from the agent's own log):
// one block per step, its tool calls and the observations that answer them.
function renderAtif(a) {
  const doc = a.document || {};
  const agent = doc.agent || {};
  const head = h("div", { class: "muted" }, `ATIF ${doc.schema_version || ""} · ${agent.name || "agent"} ${agent.version || ""}` +
    (agent.model_name ? ` · ${agent.model_name}` : "") + ` · from ${a.source}` + (doc.notes ? ` · ${doc.notes}` : ""));
  const steps = (doc.steps || []).map((s) => {
    const parts = [];
    if (s.reasoning_content) parts.push(h("pre", { class: "reasoning" }, s.reasoning_content));
    const text = contentText(s.message);
    if (text) parts.push(h("pre", {}, text));
    for (const tc of s.tool_calls || []) parts.push(h("pre", { class: "tool-call", "data-call": tc.tool_call_id }, callText({ name: tc.function_name, arguments: tc.arguments })));
    for (const r of (s.observation && s.observation.results) || []) {
      const code = r.extra && r.extra.exit_code !== undefined && r.extra.exit_code !== null ? ` (exit ${r.extra.exit_code})` : "";
      parts.push(h("pre", { class: "observation", "data-call": r.source_call_id || "" }, `→${code} ${contentText(r.content)}`));
    }
    const m = s.metrics;
    const tok = m && (m.prompt_tokens !== undefined || m.completion_tokens !== undefined) ? ` · ${m.prompt_tokens ?? "?"} in / ${m.completion_tokens ?? "?"} out` : "";
    const role = s.source === "agent" ? "assistant" : s.source;
    return h("div", { class: `msg role-${role} atif-step`, "data-step": String(s.step_id) }, h("div", { class: "role" }, `${s.step_id} · ${s.source}${tok}`), parts);
  });
  return h("div", { id: "atif-trajectory" }, head, steps);
}

function fileLink(r, path) {
  return h("a", { href: `/api/jobs/${enc(r.job)}/trials/${enc(r.trial)}/files/${path.split("/").map(enc).join("/")}`, target: "_blank" }, path);
}

function texts(list, id) {
  if (!list.length) return h("p", { class: "muted", id }, "none");
  return h("div", { id }, list.map((f) => [h("div", { class: "muted" }, `${f.name} (${f.size} bytes${f.truncated ? ", truncated" : ""})`), h("pre", {}, f.text)]));
}

function trialTokens(res) {
  const a = res.agent_result;
  if (!a || (a.n_input_tokens === null && a.n_output_tokens === null)) return null;
  return { input: a.n_input_tokens || 0, output: a.n_output_tokens || 0 };
}

function renderTrial(data, r) {
  const timings = Object.entries(data.timings || {}).map(([k, v]) =>
    h("tr", {}, h("td", {}, k), h("td", { class: "num" }, secs(v.duration_sec)), h("td", { class: "muted" }, v.started_at || "")));
  const rewards = Object.entries(data.rewards || {}).map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", { class: "num" }, fmt(v, 4))));
  const res = data.result || {};
  const err = res.error ? `${res.error.kind}: ${res.error.message}` : null;
  const agentErr = res.agent_result && res.agent_result.error ? `${res.agent_result.error.type}: ${res.agent_result.error.message}` : null;
  return [
    h("h1", {}, `${data.task || data.trial} · attempt ${data.attempt ?? "?"}`),
    data.bad_record ? h("p", { class: "err", id: "bad-record" }, `record skipped: ${data.bad_record}`) : null,
    h("div", { class: "cards", id: "trial-cards" },
      card("outcome", data.outcome || data.status),
      card("reward", fmt(data.rewards ? (data.rewards.reward ?? Object.values(data.rewards)[0]) : null)),
      card("duration", secs(data.duration_sec)),
      card("tokens", tokensText(trialTokens(res))),
      card("cost", usd(data.cost_usd))),
    err ? h("p", { class: "err", id: "trial-error" }, err) : null,
    (data.verifier_tail || []).length ? h("div", { id: "why" }, h("div", { class: "muted" }, "verifier output, last lines:"), h("pre", {}, data.verifier_tail.join("\n"))) : null,
    agentErr ? h("p", { class: "err" }, "agent: " + agentErr) : null,
    h("h2", {}, "Verifier stages"),
    (data.stages || []).length
      ? table(["stage", "status", "why"], data.stages.map((s) => h("tr", { class: ["failed", "vetoed", "error"].includes(s.status) ? "err" : null },
          h("td", {}, s.name), h("td", {}, s.status), h("td", {}, s.reason || ""))), { id: "stages" })
      : h("p", { class: "muted", id: "stages" }, "no verifier stages recorded"),
    h("h2", {}, "Rewards"),
    rewards.length ? table(["key", "reward"], rewards, { id: "rewards" }) : h("p", { class: "muted", id: "rewards" }, "no reward"),
    h("h2", {}, "Timings"),
    table(["phase", "duration", "started"], timings, { id: "timings" }),
    h("h2", {}, "Instruction"),
    data.instruction ? h("pre", { id: "instruction" }, data.instruction.text) : h("p", { class: "muted", id: "instruction" }, "instruction not found"),
    h("h2", {}, "Agent"),
    data.atif ? renderAtif(data.atif) : data.trajectory !== null ? renderTrajectory(data.trajectory) : texts(data.agent_logs, "agent-logs"),
    h("h2", {}, "Verifier"),
    texts(data.verifier, "verifier"),
    h("h2", {}, "Trial log"),
    h("pre", { id: "trial-log" }, data.log.map((l) => `${l.ts} ${l.level} ${l.message}`).join("\n")),
    h("h2", {}, "Files"),
    h("ul", { id: "files" }, data.files.map((f) => h("li", {}, fileLink(r, f.path), h("span", { class: "muted" }, ` ${f.size} B`)))),
  ];
}

async function refresh() {
  const r = route();
  const key = location.hash;
  let res, body;
  try {
    res = await fetch(r.api, { cache: "no-store" });
    body = await res.text();
  } catch (e) {
    live.textContent = "offline";
    return;
  }
  live.textContent = "updated " + new Date().toLocaleTimeString();
  if (key !== location.hash) return; // the route changed while we waited
  if (key === lastKey && body === lastBody) return; // nothing new: keep scroll and selection
  lastKey = key;
  lastBody = body;
  const data = JSON.parse(body);
  if (!res.ok) {
    setCrumbs(r);
    app.replaceChildren(h("p", { class: "err", id: "error" }, data.error || res.statusText));
  } else {
    setCrumbs(r, { task: r.task || data.task });
    const view = { jobs: renderJobs, job: renderJob, task: renderTask, trial: renderTrial, train: renderTrain }[r.view];
    app.replaceChildren(...view(data, r).flat().filter(Boolean));
  }
  document.body.dataset.view = r.view;
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

function start() {
  lastKey = null;
  if (timer) clearInterval(timer);
  refresh();
  timer = setInterval(refresh, POLL_MS);
}

window.addEventListener("hashchange", start);
start();
