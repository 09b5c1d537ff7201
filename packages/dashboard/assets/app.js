// The dashboard page: plain DOM, no build step. Every value that comes from Redis (names, ids,
// payloads, error texts, event details) reaches the page through text nodes or attribute values
// set with setAttribute, never through innerHTML, so a payload with <script> shows as text. The
// server's Content-Security-Policy (script-src 'self') is the second lock on the same door.
'use strict';
(function () {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`).getAttribute('content');
  const BASE = meta('rsc-base');
  const CSRF = meta('rsc-csrf');
  const READ_ONLY = meta('rsc-read-only') !== 'false';
  const OVERVIEW_EVERY_MS = 5000;
  const DEAD_LETTERS_EVERY_MS = 15000;
  const MAX_EVENTS = 200;
  const PALETTE = ['#60a5fa', '#f472b6', '#34d399', '#fbbf24', '#a78bfa', '#f87171', '#2dd4bf', '#fb923c', '#a3e635', '#e879f9', '#38bdf8', '#facc15'];
  const REBALANCE_EVENTS = new Set(['MEMBER_JOINED', 'MEMBER_LEFT', 'MEMBER_EXPIRED', 'TARGET_COMMITTED', 'SHARDS_REVOKING', 'SHARDS_RELEASED', 'SHARDS_ASSIGNED']);

  const app = document.getElementById('app');
  let teardown = () => {};

  /** h('td', { class: 'num' }, 'text', child): elements with text children only; attributes by setAttribute. */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'on') for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
      else if (name === 'style') for (const [key, v] of Object.entries(value)) el.style.setProperty(key, v);
      else el.setAttribute(name, String(value));
    }
    append(el, children);
    return el;
  }
  function append(el, ...children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }
  function replace(el, ...children) {
    el.replaceChildren();
    return append(el, children);
  }
  const svg = (tag, attrs) => {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [name, value] of Object.entries(attrs || {})) el.setAttribute(name, String(value));
    return el;
  };

  const enc = encodeURIComponent;
  const fmt = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US'));
  const fmtTime = (iso) => new Date(iso).toISOString().replace('T', ' ').slice(0, 23);
  const fmtMs = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`);
  /** 0,1,2,5,6 -> "0-2, 5-6" */
  function ranges(refs) {
    const list = refs.map((r) => (typeof r === 'number' ? r : r.shardIndex)).sort((a, b) => a - b);
    const out = [];
    for (let i = 0; i < list.length; i++) {
      let j = i;
      while (j + 1 < list.length && list[j + 1] === list[j] + 1) j++;
      out.push(j > i ? `${list[i]}-${list[j]}` : `${list[i]}`);
      i = j;
    }
    return out.join(', ') || '–';
  }

  function status(text) {
    document.getElementById('status').textContent = text || '';
  }
  function toast(text, bad) {
    const el = document.getElementById('toast');
    el.textContent = text;
    el.className = bad ? 'toast bad' : 'toast';
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (el.hidden = true), 5000);
  }

  async function getJson(path) {
    const response = await fetch(BASE + path, { headers: { accept: 'application/json' } });
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }
  /** An action: JSON body, the CSRF token in its header (the server compares it with the cookie). */
  async function post(path, body) {
    try {
      const response = await fetch(BASE + path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-rsc-csrf': CSRF },
        body: JSON.stringify(body || {}),
      });
      const reply = await response.json().catch(() => ({ error: response.statusText }));
      if (!response.ok) throw new Error(reply.error || response.statusText);
      toast(`${reply.action}: ${reply.target}`);
      return reply;
    } catch (error) {
      toast(error.message, true);
      return undefined;
    }
  }

  // ---------- overview: streams and groups ----------

  function overviewPage() {
    document.getElementById('crumbs').replaceChildren();
    const streams = h('section', { id: 'streams' }, h('h2', {}, 'Streams and groups'), h('p', { class: 'muted' }, 'Loading…'));
    const listeners = h('section', { id: 'listeners' }, h('h2', {}, 'Listeners of this application'));
    replace(app, streams, listeners);
    let stopped = false;
    let timer;
    async function refresh() {
      try {
        const [overview, config] = await Promise.all([getJson('/api/overview'), getJson('/api/config')]);
        if (stopped) return;
        renderStreams(streams, overview);
        renderListeners(listeners, config.listeners, refresh);
        status('');
      } catch (error) {
        status(`overview: ${error.message}`);
      }
      if (!stopped) timer = setTimeout(refresh, OVERVIEW_EVERY_MS);
    }
    refresh();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  function renderStreams(section, overview) {
    const head = h('tr', {}, ['Stream', 'Shards', 'Metadata version', 'Group', 'State', 'Group epoch', 'Assignment epoch', 'Active members', 'Backlog', 'Cutover', '']
      .map((t, i) => h('th', { class: i === 1 || (i >= 5 && i <= 8) ? 'num' : undefined }, t)));
    const rows = [];
    for (const stream of overview.streams) {
      const groups = stream.groups.length > 0 ? stream.groups : [null];
      groups.forEach((group, i) => {
        rows.push(h('tr', { 'data-stream': stream.streamPrefix, 'data-group': group ? group.consumerGroup : '' },
          h('td', {}, i === 0 ? stream.streamPrefix : ''),
          h('td', { class: 'num' }, i === 0 ? `${stream.shardCount}${stream.shardSpan > stream.shardCount ? ` (+${stream.shardSpan - stream.shardCount} draining)` : ''}` : ''),
          h('td', { class: 'num' }, i === 0 ? stream.metadataVersion : ''),
          group
            ? [
              h('td', {}, h('a', { href: `#/group/${enc(stream.streamPrefix)}/${enc(group.consumerGroup)}` }, group.consumerGroup)),
              h('td', {}, group.state ? h('span', { class: `badge ${group.state}` }, group.state) : h('span', { class: 'muted', title: group.error }, 'unreadable')),
              h('td', { class: 'num' }, fmt(group.groupEpoch)),
              h('td', { class: 'num' }, fmt(group.assignmentEpoch)),
              h('td', { class: 'num' }, fmt(group.activeMembers)),
              h('td', { class: 'num' }, fmt(group.backlog)),
              h('td', {}, group.cutoverInProgress ? 'in progress' : '–'),
            ]
            : [h('td', { class: 'muted' }, 'no group'), h('td'), h('td'), h('td'), h('td'), h('td'), h('td')],
          h('td', {}, i === 0 && !READ_ONLY ? resizeControl(stream) : ''),
        ));
      });
    }
    replace(section, h('h2', {}, 'Streams and groups'),
      overview.streams.length === 0 ? h('p', { class: 'muted' }, 'No stream has shard metadata under this key prefix yet.') : h('table', {}, h('thead', {}, head), h('tbody', {}, rows)));
  }

  function resizeControl(stream) {
    const input = h('input', { type: 'number', min: 1, value: stream.shardCount, 'aria-label': `new shard count of ${stream.streamPrefix}` });
    const button = h('button', {
      on: {
        click: () => {
          const n = Number(input.value);
          if (confirm(`Resize stream ${stream.streamPrefix} from ${stream.shardCount} to ${n} shards?`)) post(`/api/streams/${enc(stream.streamPrefix)}/resize`, { shardCount: n });
        },
      },
    }, 'Resize');
    return [input, ' ', button];
  }

  function renderListeners(section, listeners, refresh) {
    if (!listeners) {
      replace(section, h('h2', {}, 'Listeners of this application'), h('p', { class: 'muted' }, 'This dashboard was given no listeners.'));
      return;
    }
    const rows = listeners.map((l) => h('tr', { 'data-listener': l.id },
      h('td', { class: 'mono' }, l.id), h('td', {}, l.kind), h('td', {}, l.streamPrefix || '–'), h('td', {}, l.consumerGroup || '–'),
      h('td', { class: 'num' }, l.concurrency), h('td', {}, l.running ? (l.paused ? 'paused' : 'running') : 'stopped'),
      h('td', {}, READ_ONLY ? '' : h('button', { on: { click: async () => { await post(`/api/listeners/${enc(l.id)}/${l.paused ? 'resume' : 'pause'}`); refresh(); } } }, l.paused ? 'Resume' : 'Pause')),
    ));
    replace(section, h('h2', {}, 'Listeners of this application'),
      h('table', {}, h('thead', {}, h('tr', {}, ['Id', 'Kind', 'Stream', 'Group', 'Members', 'State', ''].map((t) => h('th', {}, t)))), h('tbody', {}, rows)));
  }

  // ---------- a group: shard map, members, events, lag, cutover, dead letters ----------

  function groupPage(streamPrefix, consumerGroup) {
    replace(document.getElementById('crumbs'), '/ ', streamPrefix, ' / ', consumerGroup);
    const sections = {
      header: h('section', { id: 'group-header' }, h('h2', {}, `Group ${consumerGroup} of stream ${streamPrefix}`), h('p', { class: 'muted' }, 'Connecting…')),
      map: h('section', { id: 'shard-map' }, h('h2', {}, 'Shard map')),
      members: h('section', { id: 'members' }, h('h2', {}, 'Members')),
      schedules: h('section', { id: 'schedules' }, h('h2', {}, 'Schedules')),
      lag: h('section', { id: 'lag-chart' }, h('h2', {}, 'Backlog over time')),
      cutover: h('section', { id: 'cutover' }, h('h2', {}, 'Resize cutover')),
      events: h('section', { id: 'events' }, h('h2', {}, 'Event log (live)')),
      dead: h('section', { id: 'dead-letters' }, h('h2', {}, 'Dead letters')),
    };
    replace(app, Object.values(sections));
    const state = { snapshot: null, events: [], history: [], names: new Map(), colours: new Map() };
    const eventsTable = h('tbody');
    append(sections.events, h('div', { class: 'events' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Time', 'Type', 'Member', 'Group epoch', 'Assignment epoch', 'Detail'].map((t, i) => h('th', { class: i === 3 || i === 4 ? 'num' : undefined }, t)))),
      eventsTable)));

    const source = new EventSource(`${BASE}/api/groups/${enc(streamPrefix)}/${enc(consumerGroup)}/live`);
    source.addEventListener('hello', (e) => {
      const hello = JSON.parse(e.data);
      state.history = hello.history;
      state.events = [];
      eventsTable.replaceChildren();
      if (hello.snapshot) applySnapshot(hello.snapshot);
      addEvents(hello.events, false);
      status(hello.problem || '');
    });
    source.addEventListener('snapshot', (e) => {
      const { snapshot, point } = JSON.parse(e.data);
      state.history.push(point);
      if (state.history.length > 300) state.history.shift();
      applySnapshot(snapshot);
    });
    source.addEventListener('events', (e) => addEvents(JSON.parse(e.data), true));
    source.addEventListener('problem', (e) => status(JSON.parse(e.data).message));
    source.addEventListener('recovered', () => status(''));
    // A refused stream (the group does not exist, or the dashboard is at its limit) is closed for good.
    source.onerror = () =>
      status(source.readyState === EventSource.CLOSED
        ? 'live stream refused (the group does not exist, or the dashboard is at its limit): reload to try again'
        : 'live stream interrupted: reconnecting…');
    source.onopen = () => status('');

    function applySnapshot(snapshot) {
      state.snapshot = snapshot;
      for (const m of snapshot.members) state.names.set(m.memberId, m.memberName);
      // Colours by member id order: stable while the set of members is.
      const ids = snapshot.members.map((m) => m.memberId).sort();
      state.colours = new Map(ids.map((id, i) => [id, PALETTE[i % PALETTE.length]]));
      // Events that came before the first read show ids: name them now.
      for (const cell of eventsTable.querySelectorAll('td[data-member]')) cell.textContent = state.names.get(cell.dataset.member) || cell.dataset.member;
      renderHeader(sections.header, snapshot, streamPrefix, consumerGroup);
      renderShardMap(sections.map, snapshot, state);
      renderMembers(sections.members, snapshot, state);
      renderSchedules(sections.schedules, snapshot);
      renderLag(sections.lag, state.history);
      renderCutover(sections.cutover, snapshot.cutover);
    }
    function addEvents(events, fresh) {
      for (const event of events) {
        state.events.unshift(event);
        const row = h('tr', { class: [fresh ? 'fresh' : '', REBALANCE_EVENTS.has(event.type) ? 'rebalance' : ''].join(' ').trim() || undefined, 'data-type': event.type },
          h('td', { class: 'mono' }, fmtTime(event.at)),
          h('td', {}, event.type),
          h('td', { class: 'mono', title: event.memberId, 'data-member': event.memberId }, state.names.get(event.memberId) || event.memberId),
          h('td', { class: 'num' }, event.groupEpoch),
          h('td', { class: 'num' }, event.assignmentEpoch),
          h('td', { class: 'wrap' }, event.detail));
        eventsTable.insertBefore(row, eventsTable.firstChild);
      }
      while (eventsTable.children.length > MAX_EVENTS) eventsTable.lastChild.remove();
    }

    let deadTimer;
    let stopped = false;
    async function loadDeadLetters() {
      clearTimeout(deadTimer);
      try {
        const { deadLetters } = await getJson(`/api/groups/${enc(streamPrefix)}/${enc(consumerGroup)}/dead-letters`);
        if (!stopped) renderDeadLetters(sections.dead, deadLetters, streamPrefix, consumerGroup, loadDeadLetters);
      } catch (error) {
        replace(sections.dead, h('h2', {}, 'Dead letters'), h('p', { class: 'muted' }, error.message));
      }
      if (!stopped) deadTimer = setTimeout(loadDeadLetters, DEAD_LETTERS_EVERY_MS);
    }
    loadDeadLetters();
    return () => {
      stopped = true;
      clearTimeout(deadTimer);
      source.close();
    };
  }

  function renderHeader(section, s, streamPrefix, consumerGroup) {
    const g = s.group;
    const item = (label, value) => h('span', {}, `${label} `, h('b', {}, value));
    replace(section, h('h2', {}, `Group ${consumerGroup} of stream ${streamPrefix}`),
      h('div', { class: 'summary' },
        h('span', { class: `badge ${g.state}`, id: 'group-state' }, g.state),
        item('group epoch', g.groupEpoch), item('assignment epoch', g.assignmentEpoch), item('metadata version', g.metadataVersion),
        item('shards', g.shardCount), item('readable', ranges(g.readableShardSet)),
        item('active members', s.members.filter((m) => m.state === 'ACTIVE').length), item('backlog', fmt(s.backlog)),
        h('span', { class: 'muted' }, `read at ${fmtTime(new Date(s.at).toISOString())} (Redis time)`)));
  }

  function renderShardMap(section, s, state) {
    const maxBacklog = Math.max(1, ...s.shards.map((x) => x.backlog));
    const cells = s.shards.map((shard) => {
      const owner = shard.owner ? state.names.get(shard.owner) || shard.owner : 'no owner';
      const waiting = (s.scheduleCounts || []).map((kind) => ` · ${kind} ${shard[kind]}`).join('');
      const title = `shard ${shard.shardIndex} · ${shard.readability} · ${shard.state} · ${owner} · lag ${shard.lag} · pending ${shard.pending}${waiting}`;
      return h('div', {
        class: `shard ${shard.state} ${shard.readability}`,
        title,
        'data-shard': shard.shardIndex,
        'data-owner': shard.owner || '',
        'data-state': shard.state,
        style: shard.owner ? { 'background-color': state.colours.get(shard.owner) || '#cbd5e1' } : undefined,
      }, String(shard.shardIndex), h('div', { class: 'lag', style: { height: `${Math.round((shard.backlog / maxBacklog) * 100)}%` } }));
    });
    const owners = s.members.filter((m) => m.currentAssignment.length > 0 || m.revoking.length > 0);
    replace(section, h('h2', {}, `Shard map (${s.shards.length} shards, coloured by owner; dark bar: backlog)`),
      h('div', { class: 'shard-grid' }, cells),
      h('div', { class: 'legend' },
        owners.map((m) => h('span', {}, h('span', { class: 'swatch', style: { 'background-color': state.colours.get(m.memberId) } }), m.memberName)),
        h('span', {}, h('span', { class: 'swatch revoking' }), 'revoking'),
        h('span', {}, h('span', { class: 'swatch', style: { 'background-color': '#e5e7eb' } }), 'unowned')));
  }

  /** A long wait for people: 850 ms, 12.0 s, 4 min 10 s, 2 h 05 min, 3 d 4 h. */
  function fmtWait(ms) {
    if (ms < 60000) return fmtMs(ms);
    const s = Math.floor(ms / 1000);
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }
  /** A schedule's count and its next due time against Redis' clock `at`: "3 (next in 4.0 s)", "3 (due 1.2 s ago)". */
  function scheduleCell(count, due, at) {
    if (!count || due === null || due === undefined) return fmt(count);
    return due > at ? `${fmt(count)} (next in ${fmtWait(due - at)})` : `${fmt(count)} (due ${fmtWait(at - due)} ago)`;
  }
  /** The most shard rows the schedules table shows (a stream may have 8,192 shards); the rest are counted. */
  const SCHEDULE_ROWS = 200;
  // What waits outside the streams, one column per count the server lists (s.scheduleCounts).
  function renderSchedules(section, s) {
    const kinds = s.scheduleCounts || [];
    const g = s.group;
    const at = g.describedAt;
    const busy = s.shards.filter((shard) => kinds.some((kind) => shard[kind] > 0));
    const rows = busy.slice(0, SCHEDULE_ROWS).map((shard) => h('tr', { 'data-shard': shard.shardIndex },
      h('td', { class: 'num' }, shard.shardIndex),
      kinds.map((kind) => h('td', { class: 'num', 'data-kind': kind }, scheduleCell(shard[kind], (shard.nextDueAt || {})[kind], at)))));
    replace(section, h('h2', {}, 'Schedules (delayed entries, deferred retries)'),
      h('div', { class: 'summary', id: 'schedule-totals' }, kinds.map((kind) => h('span', { 'data-kind': kind }, `${kind} `, h('b', {}, scheduleCell(g[kind], (g.nextDueAt || {})[kind], at))))),
      busy.length === 0
        ? h('p', { class: 'muted' }, 'Nothing waits in the schedules.')
        : h('table', {}, h('thead', {}, h('tr', {}, h('th', { class: 'num' }, 'Shard'), kinds.map((kind) => h('th', { class: 'num' }, kind)))), h('tbody', {}, rows)),
      busy.length > SCHEDULE_ROWS ? h('p', { class: 'muted' }, `and ${busy.length - SCHEDULE_ROWS} more shards`) : null,
      h('p', { class: 'muted' }, `Delayed entries are the stream's (every group's); deferred retries this group's. Due entries are released by the shard's owner in its next turn. rsc schedule lists them, makes one due now or drops it.`));
  }

  function renderMembers(section, s, state) {
    // A departed static member (awaitedUntil) is still ACTIVE in the protocol; the page says AWAY.
    const rows = s.members.map((m) => h('tr', { 'data-member': m.memberId },
      h('td', {}, h('span', { class: 'swatch', style: { 'background-color': state.colours.get(m.memberId) } }), m.memberName),
      h('td', { class: 'mono' }, m.memberId),
      h('td', {}, m.awaitedUntil
        ? h('span', { class: 'badge AWAY', title: `departed ${m.departedAt}; its shards wait for its next instance until ${m.awaitedUntil}` }, 'AWAY')
        : h('span', { class: `badge ${m.state}` }, m.state)),
      h('td', { class: 'num' }, m.memberEpoch),
      h('td', { class: 'num' }, m.state === 'ACTIVE' ? fmtMs(m.leaseLeftMs) : '–'),
      h('td', {}, ranges(m.currentAssignment)),
      h('td', {}, m.revoking.length ? ranges(m.revoking) : '–'),
      h('td', { class: 'num' }, m.handlerRate === null ? '–' : `${m.handlerRate.toFixed(1)}/s`),
      h('td', { class: 'num' }, m.weight),
      h('td', { class: 'mono' }, m.memberInstanceId || '–')));
    const away = s.members.filter((m) => m.awaitedUntil);
    replace(section, h('h2', {}, `Members (${s.members.length})`),
      h('table', {}, h('thead', {}, h('tr', {}, ['Name', 'Id', 'State', 'Epoch', 'Lease left', 'Owned shards', 'Revoking', 'Handler rate', 'Weight', 'Instance']
        .map((t, i) => h('th', { class: [3, 4, 7, 8].includes(i) ? 'num' : undefined }, t)))), h('tbody', {}, rows)),
      away.length === 0 ? null : h('div', { id: 'awaited-members' },
        h('h3', {}, `Awaited static members (${away.length}): departed, their shards wait unread for their next instance`),
        h('table', {}, h('thead', {}, h('tr', {}, ['Instance', 'Departed', 'Wait ends', 'Wait left', 'Shards'].map((t) => h('th', {}, t)))),
          h('tbody', {}, away.map((m) => h('tr', { 'data-member': m.memberId },
            h('td', { class: 'mono' }, m.memberInstanceId),
            h('td', {}, m.departedAt),
            h('td', {}, m.awaitedUntil),
            h('td', { class: 'num' }, fmtMs(m.awaitedLeftMs)),
            h('td', {}, ranges(m.currentAssignment))))))),
      h('p', { class: 'muted' }, 'Handler rate: entries acknowledged per second over 10 s, for members of this process.'));
  }

  function renderLag(section, history) {
    const width = 800;
    const height = 180;
    const pad = 36;
    const chart = svg('svg', { class: 'chart', viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': 'backlog over time' });
    const maxY = Math.max(1, ...history.map((p) => p.lag + p.pending));
    const t0 = history.length ? history[0].at : 0;
    const t1 = history.length ? history[history.length - 1].at : 1;
    const x = (t) => pad + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad - 8);
    const y = (v) => height - 20 - (v / maxY) * (height - 30);
    chart.appendChild(svg('line', { class: 'axis', x1: pad, y1: height - 20, x2: width - 8, y2: height - 20 }));
    chart.appendChild(svg('line', { class: 'axis', x1: pad, y1: 10, x2: pad, y2: height - 20 }));
    const label = (text, attrs) => {
      const t = svg('text', attrs);
      t.textContent = text;
      chart.appendChild(t);
    };
    label(fmt(maxY), { x: 2, y: 16 });
    label('0', { x: 2, y: height - 20 });
    if (history.length > 1) {
      label(`last ${fmtMs(t1 - t0)}`, { x: pad, y: height - 4 });
      chart.appendChild(svg('polyline', { class: 'line', points: history.map((p) => `${x(p.at).toFixed(1)},${y(p.lag + p.pending).toFixed(1)}`).join(' ') }));
      chart.appendChild(svg('polyline', { class: 'pending', points: history.map((p) => `${x(p.at).toFixed(1)},${y(p.pending).toFixed(1)}`).join(' ') }));
    }
    const last = history[history.length - 1];
    replace(section, h('h2', {}, 'Backlog over time'), chart,
      h('p', { class: 'muted' }, last ? `now: ${fmt(last.lag)} undelivered, ${fmt(last.pending)} pending (solid: backlog, dashed: pending; kept while the page is open)` : 'no reading yet'));
  }

  function renderCutover(section, status) {
    if (!status || !status.cutover) {
      replace(section, h('h2', {}, 'Resize cutover'), h('p', { class: 'muted', id: 'no-cutover' }, 'No cutover in progress: the group reads every shard of the current count.'));
      return;
    }
    const c = status.cutover;
    const waiting = status.waitingFor || [];
    const done = c.wait.length - waiting.length;
    replace(section, h('h2', {}, `Resize cutover: ${c.from} → ${c.to} shards (${c.ordered ? 'ordered' : 'unordered'})`),
      h('div', { class: 'summary' },
        h('span', {}, 'metadata version ', h('b', {}, c.version)),
        h('span', {}, 'grace left ', h('b', {}, fmtMs(status.graceLeftMs || 0))),
        h('span', {}, 'shards processed ', h('b', {}, `${done} / ${c.wait.length}`)),
        h('span', {}, status.ready ? 'ready to complete' : 'waiting')),
      h('div', { class: 'progress', title: `${done} of ${c.wait.length} shards processed` }, h('div', { style: { width: `${c.wait.length ? Math.round((done / c.wait.length) * 100) : 100}%` } })),
      waiting.length
        ? h('p', {}, 'Waiting for: ', waiting.map((w) => `shard ${w.shardIndex}${w.undelivered ? ' (undelivered)' : ''}${w.pending ? ' (pending)' : ''}`).join(', '))
        : h('p', { class: 'muted' }, c.held.length ? `held shards: ${ranges(c.held)}` : 'every shard processed'));
  }

  /**
   * The entry's own fields, one `name: value` line each (as the producer wrote them), the payload as
   * people read it: a binary codec's (msgpack) decoded, or its bytes as base64 (payloadText).
   */
  function entryText(fields, payloadText) {
    const lines = [];
    for (let i = 0; i + 1 < fields.length; i += 2) lines.push(`${fields[i]}: ${fields[i] === 'p' && payloadText !== undefined ? payloadText : fields[i + 1]}`);
    return lines.join('\n') || '–';
  }

  function renderDeadLetters(section, letters, streamPrefix, consumerGroup, reload) {
    const act = (verb, ref) => async () => {
      if (verb === 'purge' && !confirm(`Delete dead letter ${ref} for good?`)) return;
      await post(`/api/groups/${enc(streamPrefix)}/${enc(consumerGroup)}/dead-letters/${verb}`, { ref });
      reload();
    };
    const rows = letters.map((l) => h('tr', { 'data-ref': l.ref },
      h('td', { class: 'mono' }, l.ref),
      h('td', { class: 'mono' }, fmtTime(l.deadLetteredAt)),
      h('td', {}, l.key === undefined ? '–' : l.key),
      h('td', { class: 'wrap reason' }, l.error),
      h('td', { class: 'num' }, l.attempts),
      h('td', { class: 'mono wrap payload' }, entryText(l.fields, l.payloadText)),
      h('td', {}, READ_ONLY ? '' : [h('button', { on: { click: act('replay', l.ref) } }, 'Replay'), ' ', h('button', { on: { click: act('purge', l.ref) } }, 'Purge')])));
    replace(section, h('h2', {}, `Dead letters (${letters.length}${letters.length >= 100 ? '+, the oldest 100' : ''})`, ' ', h('button', { on: { click: reload } }, 'Refresh')),
      letters.length === 0 ? h('p', { class: 'muted' }, 'None.') :
        h('table', {}, h('thead', {}, h('tr', {}, ['Ref', 'Dead-lettered', 'Key', 'Reason', 'Attempts', 'Entry', ''].map((t, i) => h('th', { class: i === 4 ? 'num' : undefined }, t)))), h('tbody', {}, rows)));
  }

  // ---------- routing ----------

  function route() {
    teardown();
    const match = /^#\/group\/([^/]+)\/([^/]+)$/.exec(location.hash);
    teardown = match ? groupPage(decodeURIComponent(match[1]), decodeURIComponent(match[2])) : overviewPage();
  }
  const mode = document.getElementById('mode');
  mode.textContent = READ_ONLY ? 'read-only' : 'actions on';
  if (!READ_ONLY) mode.classList.add('write');
  window.addEventListener('hashchange', route);
  route();
})();
