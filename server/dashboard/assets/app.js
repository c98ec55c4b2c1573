// The tuneforge dashboard: four pages (jobs, one job, agents, tuning log) drawn from
// the server's /api/ endpoints and refreshed by polling. Every string from the server
// is put into the page as text (createTextNode / textContent), never as HTML.
'use strict';

const POLL_MS = 1000;      // jobs, one job, agents
const LOG_POLL_MS = 5000;  // the tuning log (a page of the db)
const JOBS_PAGE = 100;     // jobs per page, newest first

// ---------------------------------------------------------------------------
// Small helpers.

// el('td', {class: 'num'}, 'text', childNode...): an element with text children.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'href') e.setAttribute('href', v);
    else if (k.startsWith('data-') || k === 'title' || k === 'colspan') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fmt(x, digits) {
  if (x === undefined || x === null || !isFinite(x)) return '-';
  return Number(x).toFixed(digits === undefined ? 1 : digits);
}

function duration(seconds) {
  if (seconds === undefined || seconds === null || !isFinite(seconds) || seconds < 0) return '-';
  if (seconds < 90) return seconds.toFixed(0) + ' s';
  if (seconds < 5400) return (seconds / 60).toFixed(1) + ' min';
  return (seconds / 3600).toFixed(1) + ' h';
}

// A latency in the unit that shows it: "0.0447 µs", "12.3 µs", "4.567 ms", "1.23 s".
function latency(seconds) {
  if (seconds === undefined || seconds === null || !isFinite(seconds) || seconds <= 0) return '-';
  if (seconds < 1e-3) return (seconds * 1e6).toPrecision(3) + ' µs';
  if (seconds < 1) return (seconds * 1e3).toFixed(3) + ' ms';
  return seconds.toFixed(2) + ' s';
}

function query(name) {
  return new URLSearchParams(location.search).get(name) || '';
}

let session = null;  // {name, role, csrf, auth}

async function api(path, options) {
  const response = await fetch(path, Object.assign({credentials: 'same-origin'}, options || {}));
  if (response.status === 401) {
    location.href = '/login';
    throw new Error('not logged in');
  }
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || ('HTTP ' + response.status));
  return body;
}

function setStatus(text, isError) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = isError ? 'error' : 'muted';
}

// Calls `draw` now and every `ms` after the previous call ended (not while the tab is
// hidden); a failed call shows its error and the next one tries again.
function poll(draw, ms) {
  async function tick() {
    if (!document.hidden) {
      try {
        await draw();
        setStatus('updated ' + new Date().toLocaleTimeString(), false);
      } catch (e) {
        setStatus(String(e.message || e), true);
      }
    }
    setTimeout(tick, ms);
  }
  tick();
}

function replaceMain(...children) {
  const main = document.getElementById('main');
  main.replaceChildren(...children);
  return main;
}

function stateCell(state) {
  return el('td', {class: 'state state-' + state}, state);
}

function mayCancel(job) {
  if (!session || session.role === 'viewer') return false;
  return session.role === 'admin' || job.owner === session.name;
}

async function cancelJob(id) {
  if (!confirm('Cancel job ' + id + '?')) return;
  try {
    await api('/api/cancel?id=' + encodeURIComponent(id),
              {method: 'POST', headers: {'X-CSRF-Token': session.csrf}});
  } catch (e) {
    setStatus('cancel failed: ' + e.message, true);
  }
}

function cancelButton(job) {
  if (!mayCancel(job) || !(job.state === 'RUNNING' || job.state === 'QUEUED')) return '';
  const b = el('button', {type: 'button', class: 'cancel', 'data-job-id': job.job_id}, 'Cancel');
  b.addEventListener('click', () => cancelJob(job.job_id));
  return b;
}

// ---------------------------------------------------------------------------
// Jobs (the root page).

function jobsPage() {
  const table = el('table', {id: 'jobs'},
    el('thead', {}, el('tr', {},
      el('th', {}, 'Job'), el('th', {}, 'State'), el('th', {}, 'Owner'), el('th', {}, 'What'),
      el('th', {}, 'Progress'), el('th', {class: 'num'}, 'Best'),
      el('th', {class: 'num'}, 'Trials/s'), el('th', {class: 'num'}, 'ETA'),
      el('th', {}, 'Message'), el('th', {}, ''))),
    el('tbody'));
  const total = el('p', {class: 'muted'});
  const prev = el('button', {type: 'button', id: 'jobs-prev'}, '← Newer');
  const next = el('button', {type: 'button', id: 'jobs-next'}, 'Older →');
  const where = el('span', {class: 'muted'});
  let offset = Number(query('offset')) || 0;
  replaceMain(el('h1', {}, 'Jobs'), total, table, el('div', {class: 'pager'}, prev, where, next));
  const draw = async () => {
    const data = await api('/api/jobs?limit=' + JOBS_PAGE + '&offset=' + offset);
    total.textContent = data.total + ' jobs';
    where.textContent = data.jobs.length === 0 ? 'no jobs here'
      : 'newest ' + (offset + 1) + '–' + (offset + data.jobs.length);
    prev.disabled = offset === 0;
    next.disabled = offset + data.jobs.length >= data.total;
    const rows = data.jobs.map((j) => {
      const rate = j.elapsed_seconds > 0 ? j.trials_done / j.elapsed_seconds : null;
      const left = j.trials - j.trials_done;
      const eta = j.state === 'RUNNING' && rate > 0 ? left / rate : null;
      const what = j.model ? 'model ' + j.model.name
                 : (j.tasks ? j.tasks.length + ' tasks' : j.task);
      // A job of one task: its best GFLOP/s; of several: the estimated latency.
      const best = j.best ? fmt(j.best.gflops) + ' GFLOP/s'
                 : (j.estimated_seconds ? latency(j.estimated_seconds) + ' (est.)' : '-');
      return el('tr', {'data-job-id': j.job_id},
        el('td', {}, el('a', {href: '/job?id=' + encodeURIComponent(j.job_id)}, j.job_id)),
        stateCell(j.state),
        el('td', {}, j.owner || ''),
        el('td', {class: 'task'}, what || ''),
        el('td', {}, j.stored_only ? '' : el('progress', {max: Math.max(1, j.trials), value: j.trials_done}),
           ' ', j.stored_only ? '' : j.trials_done + ' / ' + j.trials),
        el('td', {class: 'num'}, best),
        el('td', {class: 'num'}, fmt(rate, 2)),
        el('td', {class: 'num'}, duration(eta)),
        el('td', {}, j.message || j.last_event || ''),
        el('td', {}, cancelButton(j)));
    });
    table.tBodies[0].replaceChildren(...rows);
  };
  const go = (to) => {
    offset = Math.max(0, to);
    history.replaceState(null, '', offset ? '/?offset=' + offset : '/');
    draw().catch((e) => setStatus(e.message, true));
  };
  prev.addEventListener('click', () => go(offset - JOBS_PAGE));
  next.addEventListener('click', () => go(offset + JOBS_PAGE));
  poll(draw, POLL_MS);
}

// ---------------------------------------------------------------------------
// One job.

// Best-so-far curves per task against the job's trial number and against time, and
// for a job of several tasks the estimated latency as it fell: the sum of weight x
// in-run factor x best, plus the leftovers, at the factors and leftovers the server has
// now (`factors` per task, 1 when unknown; `leftover` seconds, 0 when the model was
// not timed).
function jobCurves(tasks, points, factors, leftover) {
  const byTrial = tasks.map(() => []);
  const byTime = tasks.map(() => []);
  const best = tasks.map(() => Infinity);
  const estimate = [];
  const t0 = points.length ? points[0][0] : 0;
  points.forEach(([start, task, cost, error], i) => {
    const t = start - t0;
    if (task < 0 || task >= tasks.length) return;
    if (error === 'none' && cost !== null && cost < best[task]) best[task] = cost;
    const flops = tasks[task].flops;
    const y = isFinite(best[task]) && flops > 0 ? flops / best[task] / 1e9 : null;
    byTrial[task].push({x: i + 1, y});
    byTime[task].push({x: t, y});
    if (tasks.length > 1 && best.every(isFinite)) {
      let sum = leftover;
      tasks.forEach((tk, k) => { sum += tk.weight * (factors[k] || 1) * best[k]; });
      estimate.push({x: i + 1, y: sum * 1e6});
    }
  });
  return {byTrial, byTime, estimate};
}

const charts = {};

function drawChart(canvas, key, label, xLabel, yLabel, datasets) {
  const count = datasets.reduce((n, d) => n + d.data.length, 0);
  canvas.setAttribute('data-points', String(count));
  if (typeof Chart === 'undefined') return;  // the script failed to load: the table still shows
  if (!charts[key]) {
    charts[key] = new Chart(canvas, {
      type: 'line',
      data: {datasets},
      options: {
        animation: false, maintainAspectRatio: false, parsing: false, normalized: true,
        plugins: {title: {display: true, text: label}, legend: {display: datasets.length <= 12}},
        elements: {point: {radius: 0}, line: {borderWidth: 2, stepped: true}},
        scales: {x: {type: 'linear', title: {display: true, text: xLabel}},
                 y: {title: {display: true, text: yLabel}}},
      },
    });
  } else {
    charts[key].data.datasets = datasets;
    charts[key].update('none');
  }
}

const PALETTE = ['#2760c4', '#c4452a', '#1f7a3a', '#8a3ffc', '#b28600', '#007d79', '#ee538b',
                 '#5a6872', '#6929c4', '#198038'];

function datasetsOf(tasks, series) {
  return series.map((data, k) => ({
    label: tasks[k].task.length > 48 ? tasks[k].task.slice(0, 45) + '…' : tasks[k].task,
    data, borderColor: PALETTE[k % PALETTE.length], backgroundColor: PALETTE[k % PALETTE.length],
  }));
}

// A model job's summary lines on how the server timed the model, or why it did not.
function modelTimingItems(j) {
  if (!j.model || !j.model.timing) return [];
  const m = j.model.timing;
  if (!m.timed) return [['Model timing', 'not timed: ' + (m.reason || '')]];
  const items = [['Leftovers', latency(m.leftover_seconds) + ' (operators that are no task)'],
                 ['Untuned model', latency(m.untuned_seconds)]];
  if (m.in_runs > 0) {
    items.push(['Model run', latency(m.measured_seconds) + ' with the best schedules, ' + m.measured_when +
                ' (estimate before it ' + latency(m.estimated_before_seconds) + ')']);
  }
  return items;
}

function jobPage() {
  const id = query('id');
  const title = el('h1', {}, 'Job ', el('span', {id: 'job-id'}, id));
  const summary = el('dl', {class: 'summary', id: 'summary'});
  const byTrial = el('canvas', {id: 'curve-trials'});
  const byTime = el('canvas', {id: 'curve-time'});
  const estimate = el('canvas', {id: 'curve-estimate'});
  const estimateBox = el('div', {class: 'chart', hidden: true}, estimate);
  const taskTable = el('table', {id: 'tasks', hidden: true},
    el('thead', {}, el('tr', {},
      el('th', {}, 'Task'), el('th', {class: 'num'}, 'Weight'), el('th', {class: 'num'}, 'Trials'),
      el('th', {class: 'num'}, 'Rounds'), el('th', {class: 'num'}, 'Best GFLOP/s'),
      el('th', {class: 'num'}, 'Best latency'), el('th', {class: 'num'}, 'In run'), el('th', {}, 'Flat'),
      el('th', {}, 'Error'))),
    el('tbody'));
  const errors = el('ul', {id: 'errors'});
  const actions = el('p');
  replaceMain(title, actions, summary,
    el('h2', {}, 'Best so far'),
    el('div', {class: 'charts'}, el('div', {class: 'chart'}, byTrial), el('div', {class: 'chart'}, byTime),
       estimateBox),
    el('h2', {id: 'tasks-title', hidden: true}, 'Tasks'), taskTable,
    el('h2', {}, 'Recent errors'), errors);
  // The job's records so far; each poll asks only for the ones after the last id.
  const seen = {points: [], errors: [], last: 0};
  poll(async () => {
    let data;
    do {
      data = await api('/api/job?id=' + encodeURIComponent(id) + '&after=' + seen.last);
      for (const p of data.points) seen.points.push(p);
      for (const e of data.errors) seen.errors.push(e);
      seen.last = data.last_record_id;
    } while (data.more);
    if (seen.errors.length > 20) seen.errors.splice(0, seen.errors.length - 20);
    const j = data.job;
    const rate = j.elapsed_seconds > 0 ? j.trials_done / j.elapsed_seconds : null;
    const items = [
      ['State', el('span', {class: 'state state-' + j.state}, j.state)],
      ['Owner', j.owner || '-'],
      ['Task', j.task || (j.model ? 'model ' + j.model.name + ' (' + data.tasks.length + ' tasks)' : data.tasks.length + ' tasks')],
      ['Trials', (j.trials_done === undefined ? '-' : j.trials_done) + ' / ' + j.trials],
      ['Elapsed', duration(j.elapsed_seconds)],
      ['Trials/s', fmt(rate, 2)],
      ['Best', j.best ? fmt(j.best.gflops) + ' GFLOP/s, ' + latency(j.best.seconds) : '-'],
      ['Estimated latency', latency(j.estimated_seconds)],
      ...modelTimingItems(j),
      ['Message', j.message || j.last_event || ''],
      ['Warnings', (j.warnings || []).join('; ') || '-'],
    ];
    summary.replaceChildren(...items.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    actions.replaceChildren(cancelButton(j));

    const timing = j.model && j.model.timing && j.model.timing.timed ? j.model.timing : null;
    const curves = jobCurves(data.tasks, seen.points, (j.tasks || []).map((t) => t.in_run_factor),
                             timing ? timing.leftover_seconds : 0);
    drawChart(byTrial, 'trials', 'Best GFLOP/s by measurement', 'measurement', 'GFLOP/s',
              datasetsOf(data.tasks, curves.byTrial));
    drawChart(byTime, 'time', 'Best GFLOP/s by time', 'seconds', 'GFLOP/s',
              datasetsOf(data.tasks, curves.byTime));
    if (data.tasks.length > 1) {
      estimateBox.hidden = false;
      drawChart(estimate, 'estimate',
                timing ? 'Estimated latency (weight x in-run factor x best, + leftovers)'
                       : 'Estimated latency (sum of weight x best)', 'measurement', 'µs',
                [{label: 'estimate', data: curves.estimate, borderColor: PALETTE[0]}]);
    }
    if (j.tasks) {
      taskTable.hidden = false;
      document.getElementById('tasks-title').hidden = false;
      taskTable.tBodies[0].replaceChildren(...j.tasks.map((t) => el('tr', {},
        el('td', {class: 'task'}, t.task), el('td', {class: 'num'}, fmt(t.weight, 2)),
        el('td', {class: 'num'}, t.trials), el('td', {class: 'num'}, t.rounds),
        el('td', {class: 'num'}, t.best ? fmt(t.best.gflops) : '-'),
        el('td', {class: 'num'}, t.best ? latency(t.best.seconds) : '-'),
        el('td', {class: 'num'}, t.in_run_factor !== undefined ? fmt(t.in_run_factor, 2) + 'x' : '-'),
        el('td', {}, t.flat ? 'yes' : ''), el('td', {class: 'error'}, t.error || ''))));
    }
    errors.replaceChildren(...(seen.errors.length === 0
      ? [el('li', {class: 'muted'}, 'none')]
      : seen.errors.map((e) => el('li', {},
          el('a', {href: '/log?record=' + e.record_id}, 'record ' + e.record_id), ': ', e.error,
          e.task >= 0 ? ' (' + data.tasks[e.task].task + ')' : ''))));
  }, POLL_MS);
}

// ---------------------------------------------------------------------------
// Agents.

function agentsPage() {
  const table = el('table', {id: 'agents'},
    el('thead', {}, el('tr', {},
      el('th', {}, 'Agent'), el('th', {}, 'Device key'), el('th', {}, 'State'), el('th', {}, 'Reason'),
      el('th', {}, 'CPU'), el('th', {}, 'Launcher'), el('th', {class: 'num'}, 'Workers'),
      el('th', {class: 'num'}, 'In flight'), el('th', {class: 'num'}, 'Measurements'),
      el('th', {class: 'num'}, 'Meas./s'), el('th', {class: 'num'}, 'Errors'),
      el('th', {class: 'num'}, 'Last seen'))),
    el('tbody'));
  const backlog = el('p', {class: 'muted'});
  replaceMain(el('h1', {}, 'Agents'), backlog, table);
  const previous = {};  // agent id -> {t, measurements}: the rate between polls
  poll(async () => {
    const data = await api('/api/agents');
    backlog.textContent = data.agents.length + ' agents; ' + data.queued + ' requests queued, ' +
                          data.leased + ' leased';
    const now = performance.now() / 1e3;
    table.tBodies[0].replaceChildren(...data.agents.map((a) => {
      const p = previous[a.id];
      const rate = p && now > p.t ? (a.measurements - p.measurements) / (now - p.t) : null;
      previous[a.id] = {t: now, measurements: a.measurements};
      return el('tr', {'data-agent-id': a.id},
        el('td', {}, a.id), el('td', {}, a.device_key), stateCell(a.state),
        el('td', {}, a.reason || ''), el('td', {}, a.cpu + (a.cores ? ' (' + a.cores + ' cores)' : '')),
        el('td', {}, a.launcher || 'local'), el('td', {class: 'num'}, a.workers),
        el('td', {class: 'num'}, a.in_flight), el('td', {class: 'num'}, a.measurements),
        el('td', {class: 'num'}, fmt(rate, 1)), el('td', {class: 'num'}, a.errors),
        el('td', {class: 'num'}, a.last_seen_seconds_ago < 0 ? '-' : duration(a.last_seen_seconds_ago) + ' ago'));
    }));
  }, POLL_MS);
}

// ---------------------------------------------------------------------------
// The tuning log: the best record per workload and target, a page at a time.

const LOG_PAGE = 50;

function logPage() {
  const state = {op: query('op'), target: query('target'), offset: Number(query('offset')) || 0};
  const op = el('input', {name: 'op', value: state.op, placeholder: 'e.g. matmul'});
  const target = el('input', {name: 'target', value: state.target, placeholder: 'target key', size: 40});
  const form = el('form', {class: 'filter'},
    el('label', {}, 'Operator', op), el('label', {}, 'Target', target),
    el('button', {type: 'submit'}, 'Filter'));
  const download = el('a', {id: 'download'}, 'Download as JSON lines');
  const table = el('table', {id: 'log'},
    el('thead', {}, el('tr', {},
      el('th', {}, 'Operator'), el('th', {}, 'Task'), el('th', {}, 'Target'),
      el('th', {class: 'num'}, 'Best GFLOP/s'), el('th', {class: 'num'}, 'Latency'),
      el('th', {class: 'num'}, 'Measured'), el('th', {}, 'Template'), el('th', {}, 'When'),
      el('th', {}, ''))),
    el('tbody'));
  const prev = el('button', {type: 'button'}, '← Previous');
  const next = el('button', {type: 'button'}, 'Next →');
  const where = el('span', {class: 'muted'});
  const detail = el('pre', {class: 'record', id: 'record', hidden: true});
  replaceMain(el('h1', {}, 'Tuning log'), form, el('p', {}, download), table,
              el('div', {class: 'pager'}, prev, where, next), el('h2', {id: 'record-title', hidden: true}, 'Record'), detail);

  async function showRecord(id) {
    const r = await api('/api/record?id=' + encodeURIComponent(id));
    document.getElementById('record-title').hidden = false;
    detail.hidden = false;
    detail.textContent = JSON.stringify(r, null, 2);
  }

  async function draw() {
    const params = new URLSearchParams();
    if (state.op) params.set('op', state.op);
    if (state.target) params.set('target', state.target);
    download.setAttribute('href', '/api/log.jsonl?' + params.toString());
    params.set('offset', state.offset);
    params.set('limit', LOG_PAGE);
    history.replaceState(null, '', '/log?' + params.toString());
    const data = await api('/api/log?' + params.toString());
    table.tBodies[0].replaceChildren(...data.rows.map((r) => {
      const show = el('button', {type: 'button', 'data-record-id': r.record_id}, 'Record');
      show.addEventListener('click', () => showRecord(r.record_id).catch((e) => setStatus(e.message, true)));
      return el('tr', {'data-workload': r.workload_key},
        el('td', {}, r.op), el('td', {class: 'task'}, r.task), el('td', {class: 'task'}, r.target_key),
        el('td', {class: 'num'}, fmt(r.gflops)), el('td', {class: 'num'}, latency(r.seconds)),
        el('td', {class: 'num'}, r.measurements), el('td', {}, r.template),
        el('td', {}, new Date(r.start_unix_us / 1e3).toLocaleString()), el('td', {}, show));
    }));
    prev.disabled = state.offset === 0;
    next.disabled = !data.more;
    where.textContent = data.rows.length === 0 ? 'no entries'
      : 'entries ' + (state.offset + 1) + '–' + (state.offset + data.rows.length);
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    state.op = op.value.trim();
    state.target = target.value.trim();
    state.offset = 0;
    draw().catch((err) => setStatus(err.message, true));
  });
  prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - LOG_PAGE); draw(); });
  next.addEventListener('click', () => { state.offset += LOG_PAGE; draw(); });
  const record = query('record');
  if (record) showRecord(record).catch((e) => setStatus(e.message, true));
  poll(draw, LOG_POLL_MS);
}

// ---------------------------------------------------------------------------

async function main() {
  if (location.pathname === '/login') {
    document.getElementById('failed').hidden = query('failed') !== '1';
    return;
  }
  session = await api('/api/session');
  document.getElementById('who').textContent =
    session.auth ? session.name + ' (' + session.role + ')' : 'open server (no tokens file)';
  const logout = document.getElementById('logout');
  logout.hidden = !session.auth;
  logout.elements.csrf.value = session.csrf;
  const pages = {'/': ['jobs', jobsPage], '/job': ['jobs', jobPage], '/agents': ['agents', agentsPage],
                 '/log': ['log', logPage]};
  const [nav, draw] = pages[location.pathname] || pages['/'];
  for (const a of document.querySelectorAll('header nav a')) {
    a.classList.toggle('current', a.dataset.page === nav);
  }
  draw();
}

main().catch((e) => setStatus(String(e.message || e), true));
