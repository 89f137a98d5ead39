// The looping console: talks to the agent through the local gateway's console API only.
// Everything shown is built with DOM nodes and textContent: nothing the agent or a caller
// wrote is ever parsed as HTML.
"use strict";

const HEADER = "X-Looping-Console";
const SETTLED = new Set([
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
  "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
]);
const INTERRUPTED = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);
const SVG = "http://www.w3.org/2000/svg";

const state = {
  token: "",
  tenant: null,
  task: null,          // the task the stream and the detail are about
  contextId: null,
  continuing: null,    // an interrupted task the next message answers
  cursor: null,        // the stream's last event id
  sentClaims: {},      // task id -> the claims of the token that sent its turn
  inspection: null,
  selectedSubtask: null,
  approvalsFor: null,  // the task whose pending tool calls the approvals panel decides
  decisions: {},       // call id -> the decision chosen for it
};

// ---- small helpers ----

function $(id) { return document.getElementById(id); }

function h(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attributes, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pretty(value) { return JSON.stringify(value, null, 2); }
function short(id) { return id ? String(id).slice(0, 8) : ""; }
// A task id's last 8 hex digits: its first ones are its time (tasks of one minute share them).
function taskTag(id) { return id ? String(id).replace(/-/g, "").slice(-8) : ""; }
// The first words of the task's first message, to tell tasks apart in a list.
function firstWords(task, count = 8) {
  const first = (task.history || []).find((message) => message.role === "ROLE_USER");
  const words = first ? textOf(first.parts).split(/\s+/).filter(Boolean) : [];
  return words.length > count ? `${words.slice(0, count).join(" ")} …` : words.join(" ");
}
function stateName(s) { return (s || "").replace("TASK_STATE_", "").toLowerCase(); }
function pill(s) { return h("span", { class: `pill state-${s}` }, stateName(s)); }
function notice(text) { $("notice").textContent = text || ""; }
function clear(node) { node.replaceChildren(); return node; }
function time(us) { return us ? new Date(us / 1000).toLocaleTimeString() : ""; }

async function api(path, options = {}) {
  const headers = { [HEADER]: state.token, ...(options.headers || {}) };
  if (options.json !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`api/${path}`, {
    method: options.json !== undefined ? "POST" : "GET",
    headers,
    body: options.json !== undefined ? JSON.stringify(options.json) : undefined,
  });
  return response;
}

async function apiJson(path, options) {
  const response = await api(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

// Parts to show: text as it is, a data part (a structured answer) as formatted JSON.
function partsView(parts) {
  return (parts || []).map((part) =>
    part.data !== undefined ? h("pre", { class: "data" }, pretty(part.data)) : textOf([part]));
}

function textOf(parts) {
  return (parts || []).map((part) => {
    if (part.text !== undefined) return part.text;
    if (part.data !== undefined) return JSON.stringify(part.data);
    if (part.raw !== undefined) return `[${part.mediaType || "file"} ${part.filename || ""}]`;
    if (part.url !== undefined) return `[${part.url}]`;
    return "";
  }).join(" ");
}

// ---- agents ----

async function loadAgents() {
  const list = clear($("agents"));
  let body;
  try {
    body = await apiJson("agents");
  } catch (error) {
    list.append(h("li", { class: "empty" }, `Cannot read the agents: ${error.message}`));
    return;
  }
  $("endpoint").textContent = `${body.endpoint} as ${body.subject}`;
  for (const agent of body.agents) {
    if (!agent.card) {
      list.append(h("li", { class: "empty" }, `${agent.tenant}: ${agent.error}`));
      continue;
    }
    const signature = agent.signature.verified
      ? h("div", { class: "signature ok" }, `✓ signature verified (kid ${agent.signature.kid})`)
      : h("div", { class: "signature bad" }, `✗ signature: ${agent.signature.error}`);
    const item = h("li", { "data-tenant": agent.tenant, onclick: () => chooseAgent(agent.tenant) },
      h("div", { class: "name" }, agent.card.name, " ", h("span", { class: "muted" }, `(${agent.tenant})`)),
      h("div", { class: "description" }, agent.card.description || ""),
      h("div", { class: "tags" }, (agent.card.skills || []).map((s) => h("span", { class: "tag" }, s.name))),
      signature);
    list.append(item);
  }
  if (body.agents.length && !state.tenant) chooseAgent(body.agents[0].tenant);
}

function chooseAgent(tenant) {
  state.tenant = tenant;
  for (const item of $("agents").children) {
    item.classList.toggle("selected", item.dataset.tenant === tenant);
  }
  $("send").disabled = false;
  stopContinuing();
  loadTasks();
}

// ---- tasks ----

let tasksAsked = 0;  // the latest task list asked for; an older answer is dropped

async function loadTasks() {
  if (!state.tenant) return;
  const asked = ++tasksAsked;
  const params = { pageSize: 50 };  // with their history: a row shows its first words
  if ($("filter-state").value) params.status = $("filter-state").value;
  if ($("filter-context").value.trim()) params.contextId = $("filter-context").value.trim();
  let answer;
  try {
    answer = await apiJson("call", { json: { tenant: state.tenant, method: "ListTasks", params } });
  } catch (error) {
    if (asked === tasksAsked) clear($("tasks")).append(h("li", { class: "empty" }, error.message));
    return;
  }
  if (asked !== tasksAsked) return;
  const list = clear($("tasks"));
  if (answer.error) {
    list.append(h("li", { class: "empty" }, answer.error.message));
    return;
  }
  const tasks = answer.result.tasks || [];
  if (!tasks.length) list.append(h("li", { class: "empty" }, "No tasks yet"));
  for (const task of tasks) {
    list.append(h("li", {
      "data-task": task.id,
      class: task.id === state.task ? "selected" : "",
      onclick: () => openTask(task.id),
    }, h("code", { title: task.id }, taskTag(task.id)), h("span", { class: "words" }, firstWords(task)), h("span", { class: "muted" }, time(Date.parse(task.status.timestamp) * 1000)), pill(task.status.state)));
  }
}

// ---- sending and streaming ----

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function send(event) {
  event.preventDefault();
  const text = $("text").value;
  if (!state.tenant || !text.trim()) { notice("Write a message first"); return; }
  const request = { tenant: state.tenant, text };
  if (state.continuing) {
    request.taskId = state.continuing;
    request.contextId = state.contextId;
  }
  const file = $("file").files[0];
  if (file) {
    request.file = { name: file.name, mediaType: file.type || "application/octet-stream", data: await readFile(file) };
  }
  $("text").value = "";
  $("file").value = "";
  hideApprovals();
  if (!state.continuing) clear($("stream"));
  stopContinuing();
  await followStream("send", request);
}

async function resume() {
  if (!state.task) return;
  await followStream("subscribe", { tenant: state.tenant, taskId: state.task, lastEventId: state.cursor });
}

async function followStream(path, request) {
  $("send").disabled = true;
  $("stream-state").textContent = "streaming";
  $("stream-state").className = "pill running";
  let tokenClaims = null;
  let settled = false;
  try {
    const response = await api(path, { json: request });
    if (!response.ok || !(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      const body = await response.json();
      const message = body.error ? (body.error.message || body.error) : `HTTP ${response.status}`;
      streamLine("error", "refused", message);
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const raw = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        const sse = parseEvent(raw);
        if (sse.event === "token") { tokenClaims = JSON.parse(sse.data); continue; }
        if (!sse.data) continue;
        if (sse.id) { state.cursor = sse.id; $("cursor").textContent = `cursor ${sse.id}`; }
        const envelope = JSON.parse(sse.data);
        if (envelope.error) { streamLine("error", "error", envelope.error.message); continue; }
        const taskId = onResult(envelope.result);
        if (taskId && tokenClaims && !state.sentClaims[taskId]) state.sentClaims[taskId] = tokenClaims;
        settled = settled || isSettled(envelope.result);
      }
    }
  } catch (error) {
    streamLine("error", "error", error.message);
  } finally {
    $("send").disabled = !state.tenant;
    $("stream-state").textContent = settled ? "ended" : "closed";
    $("stream-state").className = "pill";
    $("resume").disabled = !state.task || settled;
    if (state.task) {
      loadTasks();
      openTask(state.task);
    }
  }
}

function parseEvent(raw) {
  const event = { event: "message", data: "", id: null };
  for (const line of raw.split(/\r?\n/)) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") event.data += (event.data ? "\n" : "") + value;
    else if (field === "event") event.event = value;
    else if (field === "id") event.id = value;
  }
  return event;
}

function isSettled(result) {
  const status = result.task ? result.task.status : result.statusUpdate ? result.statusUpdate.status : null;
  return Boolean(result.message) || Boolean(status && SETTLED.has(status.state));
}

function onResult(result) {
  let taskId = null;
  if (result.task) {
    const task = result.task;
    taskId = task.id;
    setTask(task.id, task.contextId, task.status.state);
    streamLine("task", "task", `${taskTag(task.id)} ${stateName(task.status.state)}`, task.status.state);
  } else if (result.statusUpdate) {
    const update = result.statusUpdate;
    taskId = update.taskId;
    setTask(update.taskId, update.contextId, update.status.state);
    const said = update.status.message ? partsView(update.status.message.parts) : [];
    streamLine("status", "status", said.length ? said : stateName(update.status.state), update.status.state);
    const pending = pendingCalls(update.status.message);
    if (pending.length) showApprovals(update.taskId, update.contextId, pending);
    else if (INTERRUPTED.has(update.status.state)) startContinuing(update.taskId, update.contextId);
  } else if (result.artifactUpdate) {
    const update = result.artifactUpdate;
    taskId = update.taskId;
    const name = update.artifact.name || short(update.artifact.artifactId);
    // Chunks as the agent streams them; a whole artifact (the turn's end writes each whole).
    streamLine("artifact", update.append ? "chunk" : "whole artifact", [`${name}: `, partsView(update.artifact.parts)]);
  } else if (result.message) {
    streamLine("message", "message", partsView(result.message.parts));
  }
  return taskId;
}

function streamLine(kind, label, text, taskState) {
  const list = $("stream");
  list.append(h("li", { class: kind === "error" ? "error" : "" },
    h("span", { class: "kind" }, String(list.children.length + 1)),
    h("span", { class: "kind" }, label, taskState ? " " : "", taskState ? pill(taskState) : null),
    h("span", {}, text)));
  list.scrollTop = list.scrollHeight;
}

function setTask(taskId, contextId, taskState) {
  if (state.task !== taskId) state.cursor = null;
  state.task = taskId;
  state.contextId = contextId;
  $("cancel").disabled = SETTLED.has(taskState);
}

// ---- approvals: tool calls the task waits for the caller to decide on ----

function pendingCalls(message) {
  for (const part of (message && message.parts) || []) {
    const approvals = part.data && part.data.toolApprovals;
    if (approvals && Array.isArray(approvals.pending)) return approvals.pending;
  }
  return [];
}

function showApprovals(taskId, contextId, pending) {
  state.decisions = {};
  state.approvalsFor = { taskId, contextId };
  const list = clear($("approval-calls"));
  for (const call of pending) {
    const reason = h("input", { placeholder: "Why not (optional)", "aria-label": `Reason to deny ${call.tool}`, hidden: true });
    const approve = h("button", { type: "button", class: "small approve", onclick: () => decide(call.callId, true, approve, deny, reason) }, "Approve");
    const deny = h("button", { type: "button", class: "small deny", onclick: () => decide(call.callId, false, deny, approve, reason) }, "Deny");
    list.append(h("li", { "data-call": call.callId },
      h("strong", {}, call.tool), h("code", {}, call.callId), approve, deny, reason,
      h("pre", { class: "data" }, pretty(call.arguments))));
  }
  $("approvals").hidden = pending.length === 0;
  $("send-decisions").disabled = true;
}

function decide(callId, approve, chosen, other, reason) {
  state.decisions[callId] = { callId, approve, reason };
  chosen.classList.add("chosen");
  other.classList.remove("chosen");
  reason.hidden = approve;
  const rows = $("approval-calls").children.length;
  $("send-decisions").disabled = Object.keys(state.decisions).length < rows;
}

async function sendDecisions() {
  const target = state.approvalsFor;
  if (!target) return;
  const decisions = Object.values(state.decisions).map((d) => {
    const decision = { callId: d.callId, approve: d.approve };
    if (!d.approve && d.reason.value.trim()) decision.reason = d.reason.value.trim();
    return decision;
  });
  hideApprovals();
  stopContinuing();
  await followStream("send", { tenant: state.tenant, taskId: target.taskId, contextId: target.contextId, decisions });
}

function hideApprovals() {
  state.approvalsFor = null;
  state.decisions = {};
  $("approvals").hidden = true;
}

function startContinuing(taskId, contextId) {
  state.continuing = taskId;
  state.contextId = contextId;
  $("continuing").hidden = false;
  $("continuing-id").textContent = taskTag(taskId);
  $("text").placeholder = "Your answer";
}

function stopContinuing() {
  state.continuing = null;
  $("continuing").hidden = true;
  $("text").placeholder = "Write to the agent";
}

async function cancelTask() {
  if (!state.task) return;
  const answer = await apiJson("call", { json: { tenant: state.tenant, method: "CancelTask", params: { id: state.task } } });
  if (answer.error) notice(answer.error.message);
  else notice(`Task ${taskTag(state.task)}: ${stateName(answer.result.status.state)}`);
  $("cancel").disabled = true;
  openTask(state.task);
  loadTasks();
}

// ---- one task ----

async function openTask(taskId, attempt = 0) {
  state.task = taskId;
  for (const item of $("tasks").children) item.classList.toggle("selected", item.dataset.task === taskId);
  let body;
  try {
    body = await apiJson(`inspect?tenant=${encodeURIComponent(state.tenant)}&task=${encodeURIComponent(taskId)}`);
  } catch (error) {
    notice(error.message);
    return;
  }
  if (state.task !== taskId) return;  // another task was opened meanwhile
  if (body.status !== 200) {
    notice(body.inspection && body.inspection.error ? body.inspection.error.message : `inspection: HTTP ${body.status}`);
    return;
  }
  state.inspection = body;
  const task = body.inspection.task;
  $("detail").hidden = false;
  $("detail-id").textContent = task.id;
  clear($("detail-state")).append(stateName(task.status.state));
  $("detail-state").className = `pill state-${task.status.state}`;
  $("cancel").disabled = SETTLED.has(task.status.state);
  const pending = task.status.state === "TASK_STATE_INPUT_REQUIRED" ? pendingCalls(task.status.message) : [];
  if (pending.length) showApprovals(task.id, task.contextId, pending);
  else if (INTERRUPTED.has(task.status.state)) startContinuing(task.id, task.contextId);
  renderTimeline(body.inspection);
  renderConversation(body.inspection.conversation, $("tab-conversation"));
  renderPlan(body.inspection.subtasks);
  renderPushes(body.inspection.pushes, body.received);
  renderToken(body);
  // A push follows its terminal write: look again until the agent's pushes are delivered.
  const waiting = body.inspection.pushes.some((push) => push.state === "pending");
  if ((waiting || !SETTLED.has(task.status.state)) && attempt < 20) {
    setTimeout(() => { if (state.task === taskId) openTask(taskId, attempt + 1); }, 500);
  }
}

function renderTimeline(inspection) {
  const tab = clear($("tab-timeline"));
  const events = inspection.events;
  if (!events.length) { tab.append(h("p", { class: "empty" }, "No events stored")); return; }
  const first = events[0].atUs;
  const rows = events.map((row) => {
    const event = row.event;
    let kind = "";
    let what = "";
    if (event.statusUpdate) {
      kind = "status";
      const status = event.statusUpdate.status;
      what = h("span", {}, pill(status.state), " ", status.message ? partsView(status.message.parts) : "");
    } else if (event.artifactUpdate) {
      kind = event.artifactUpdate.append ? "chunk" : "whole artifact";
      const artifact = event.artifactUpdate.artifact;
      what = h("span", {}, `${artifact.name || short(artifact.artifactId)}: `, partsView(artifact.parts));
    } else {
      kind = Object.keys(event)[0] || "";
      what = JSON.stringify(event);
    }
    return h("tr", {}, h("td", {}, row.seq), h("td", {}, `+${((row.atUs - first) / 1000).toFixed(1)} ms`), h("td", {}, kind), h("td", {}, what));
  });
  tab.append(h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "at"), h("th", {}, "event"), h("th", {}, "what"))), h("tbody", {}, rows)));
}

function renderBlock(block) {
  switch (block.type) {
    case "text": return h("div", { class: "block" }, block.text);
    case "thinking": return h("div", { class: "block muted" }, `thinking: ${block.text || ""}`);
    case "tool_use": return h("div", { class: "block tool-call" }, h("strong", {}, `calls ${block.name}`), h("pre", {}, pretty(block.input)));
    case "tool_result": return h("div", { class: `block tool-result${block.is_error ? " error" : ""}` },
      h("strong", {}, block.is_error ? "tool error" : "tool result"),
      (block.content || []).map(renderBlock));
    case "data": return h("pre", { class: "block" }, pretty(block.value));
    default: return h("div", { class: "block muted" }, `[${block.type}${block.media_type ? ` ${block.media_type}` : ""}]`);
  }
}

function renderConversation(entries, target) {
  const tab = clear(target);
  if (!entries || !entries.length) {
    tab.append(h("p", { class: "empty" }, "No conversation stored (a model-driven agent keeps one)"));
    return;
  }
  for (const entry of entries) {
    const message = entry.message;
    const role = message.role || "?";
    const classes = `message ${role}${entry.summary ? " summary" : ""}`;
    const usage = message.usage ? ` · ${message.usage.input_tokens || 0} in, ${message.usage.output_tokens || 0} out` : "";
    tab.append(h("div", { class: classes },
      h("div", { class: "role" }, entry.summary ? `${role} · compaction summary` : role, usage),
      (message.content || []).map(renderBlock)));
  }
}

function renderPlan(subtasks) {
  const tab = clear($("tab-plan"));
  if (!subtasks.length) { tab.append(h("p", { class: "empty" }, "This turn delegated nothing")); return; }
  const waves = new Map();
  for (const subtask of subtasks) {
    const wave = subtask.wave === null || subtask.wave === undefined ? 0 : subtask.wave;
    if (!waves.has(wave)) waves.set(wave, []);
    waves.get(wave).push(subtask);
  }
  const order = [...waves.keys()].sort((a, b) => (a || 1e9) - (b || 1e9));
  const width = 190, height = 64, gapX = 70, gapY = 22, top = 28;
  const position = new Map();
  order.forEach((wave, column) => {
    waves.get(wave).forEach((subtask, row) => {
      position.set(subtask.id, { x: 10 + column * (width + gapX), y: top + row * (height + gapY) });
    });
  });
  const rows = Math.max(...order.map((wave) => waves.get(wave).length));
  const graph = svg("svg", { width: 20 + order.length * (width + gapX), height: top + rows * (height + gapY), role: "img", "aria-label": "The plan's subtasks by wave" });
  graph.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#868e96" }))));
  order.forEach((wave, column) => {
    graph.append(svg("text", { x: 10 + column * (width + gapX), y: 16, class: "small" }, wave ? `wave ${wave}` : "not run"));
  });
  for (const subtask of subtasks) {
    const to = position.get(subtask.id);
    for (const dependency of subtask.dependsOn) {
      const from = position.get(dependency);
      if (!from) continue;
      graph.append(svg("path", { class: "edge", d: `M ${from.x + width} ${from.y + height / 2} C ${from.x + width + gapX / 2} ${from.y + height / 2}, ${to.x - gapX / 2} ${to.y + height / 2}, ${to.x} ${to.y + height / 2}` }));
    }
  }
  for (const subtask of subtasks) {
    const at = position.get(subtask.id);
    const took = subtask.startedUs && subtask.endedUs ? `${((subtask.endedUs - subtask.startedUs) / 1000).toFixed(0)} ms` : "";
    const tokens = subtask.usage ? `${(subtask.usage.input_tokens || 0) + (subtask.usage.output_tokens || 0)} tokens` : "";
    const node = svg("g", { class: `node ${subtask.state}${state.selectedSubtask === subtask.id ? " selected" : ""}`, "data-subtask": subtask.id, transform: `translate(${at.x} ${at.y})`, onclick: () => { state.selectedSubtask = subtask.id; renderPlan(subtasks); } },
      svg("rect", { width, height, rx: 8 }),
      svg("text", { x: 10, y: 19 }, subtask.id),
      svg("text", { x: 10, y: 36, class: "small" }, `${subtask.type} · ${subtask.state}`),
      svg("text", { x: 10, y: 52, class: "small" }, [took, tokens].filter(Boolean).join(" · ")));
    graph.append(node);
  }
  tab.append(h("div", { class: "graph" }, graph));
  const chosen = subtasks.find((s) => s.id === state.selectedSubtask) || subtasks[0];
  const detail = h("div", { class: "subtask" },
    h("h2", {}, `Subtask ${chosen.id}`, " ", h("span", { class: `pill ${chosen.state}` }, chosen.state)),
    h("table", {}, h("tbody", {},
      h("tr", {}, h("th", {}, "type"), h("td", {}, chosen.type)),
      h("tr", {}, h("th", {}, "params"), h("td", {}, h("pre", {}, pretty(chosen.params)))),
      h("tr", {}, h("th", {}, "wave / attempts"), h("td", {}, `${chosen.wave ?? "-"} / ${chosen.attempts}`)),
      h("tr", {}, h("th", {}, "result"), h("td", {}, h("pre", {}, chosen.reason ? chosen.reason : pretty(chosen.result)))))));
  const conversation = h("div", {});
  renderConversation(chosen.conversation, conversation);
  detail.append(h("h2", {}, "Its subagent's conversation"), conversation);
  tab.append(detail);
}

function renderPushes(pushes, received) {
  const tab = clear($("tab-pushes"));
  tab.append(h("h2", {}, "Queued by the agent"));
  if (!pushes.length) tab.append(h("p", { class: "empty" }, "No pushes queued"));
  else tab.append(h("table", {},
    h("thead", {}, h("tr", {}, h("th", {}, "jti"), h("th", {}, "state"), h("th", {}, "attempts"))),
    h("tbody", {}, pushes.map((push) => h("tr", {},
      h("td", {}, h("code", {}, short(push.jti))),
      h("td", {}, push.state),
      h("td", {}, push.attempts.map((a) => `#${a.attempt} ${a.status ?? a.error ?? ""} (${a.durationMs ?? "?"} ms)`).join(", ") || "none yet"))))));
  tab.append(h("h2", {}, "Received by the gateway"));
  if (!received.length) tab.append(h("p", { class: "empty" }, "None received yet"));
  else tab.append(h("table", {},
    h("thead", {}, h("tr", {}, h("th", {}, "signature"), h("th", {}, "jti"), h("th", {}, "answered"), h("th", {}, "state"))),
    h("tbody", {}, received.map((push) => h("tr", {},
      h("td", {}, push.verified ? h("span", { class: "verified" }, "✓ verified") : h("span", { class: "unverified" }, `✗ ${push.error}`)),
      h("td", {}, h("code", {}, push.claims ? short(push.claims.jti) : "")),
      h("td", {}, push.status),
      h("td", {}, push.body && push.body.task ? stateName(push.body.task.status.state) : ""))))));
}

function claimsTable(claims) {
  return h("table", {}, h("tbody", {}, Object.entries(claims).map(([key, value]) =>
    h("tr", {}, h("th", {}, key), h("td", {}, h("code", {}, typeof value === "string" ? value : JSON.stringify(value)))))));
}

function renderToken(body) {
  const tab = clear($("tab-token"));
  const task = body.inspection.task;
  tab.append(h("h2", {}, "The caller the agent verified (the task's owner)"), claimsTable(body.inspection.owner));
  const sent = state.sentClaims[task.id];
  tab.append(h("h2", {}, "The token that sent the turn"));
  tab.append(sent ? claimsTable(sent) : h("p", { class: "empty" }, "Sent from elsewhere (this page minted no token for it)"));
  tab.append(h("h2", {}, "The token this inspection was read with"), claimsTable(body.tokenClaims));
}

function showTab(name) {
  for (const button of $("tabs").children) button.classList.toggle("active", button.dataset.tab === name);
  for (const tab of document.querySelectorAll(".tab")) tab.hidden = tab.id !== `tab-${name}`;
}

// ---- start ----

function start() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("looping-console-token", fromHash);
    history.replaceState(null, "", location.pathname);
  }
  state.token = fromHash || sessionStorage.getItem("looping-console-token") || "";
  if (!state.token) notice("Open the console from the URL `looping gateway --console` printed");
  $("composer").addEventListener("submit", send);
  $("send-decisions").addEventListener("click", sendDecisions);
  $("cancel").addEventListener("click", cancelTask);
  $("resume").addEventListener("click", resume);
  $("new-task").addEventListener("click", stopContinuing);
  $("refresh-tasks").addEventListener("click", loadTasks);
  $("filter-state").addEventListener("change", loadTasks);
  $("filter-context").addEventListener("change", loadTasks);
  $("reload").addEventListener("click", () => state.task && openTask(state.task));
  for (const button of $("tabs").children) button.addEventListener("click", () => showTab(button.dataset.tab));
  loadAgents();
}

document.addEventListener("DOMContentLoaded", start);
