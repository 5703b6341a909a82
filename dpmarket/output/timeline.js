// dpmarket's interactive timeline (report.html): a canvas, no library, no network.
// Reads the JSON in <script id="dpm-timeline-data">; wheel zooms around the pointer, dragging pans,
// a double click (or "whole run") resets, hovering shows a span's details, the list picks owners.
// window.dpmarketTimeline exposes the state for tests: lanes(), view(), xOf(t), yOf(lane), hovered.
(function () {
  "use strict";
  var root = document.getElementById("dpm-timeline");
  var source = document.getElementById("dpm-timeline-data");
  if (!root || !source) return;
  var data = JSON.parse(source.textContent);
  var S = data.spans, K = {}, O = {};
  data.kinds.forEach(function (k, i) { K[k] = i; });
  data.outcomes.forEach(function (k, i) { O[k] = i; });
  var COLOURS = {applied: "#2ca02c", lost_collision: "#d62728", lost_loss: "#ff7f0e", refused: "#9467bd",
                 dropped_offline: "#8c564b", unfinished: "#7f7f7f", delivered: "#1f77b4", "": "#7f7f7f"};
  var LANE = 16, AXIS = 22, PAD = 8;
  var canvas = root.querySelector("canvas"), ctx = canvas.getContext("2d");
  var tip = root.querySelector(".dpm-tip"), picker = root.querySelector("select");
  var laneOf = {};  // owner index -> position in data.owners
  data.owners.forEach(function (o, i) { laneOf[o] = i; });
  var channels = [];
  for (var i = 0; i < S.s.length; i++) {
    if (S.kind[i] === K.collision_window && channels.indexOf(S.channel[i]) < 0) channels.push(S.channel[i]);
  }
  channels.sort(function (a, b) { return a - b; });
  var hasMarket = S.kind.indexOf(K.price_period) >= 0;
  var picked = null;  // null: every owner shown
  var view = [0, data.end > 0 ? data.end : 1];
  var lanes = [], left = 0, api;

  function layout() {
    lanes = [];
    channels.forEach(function (c) { lanes.push({label: "channel " + c, channel: c}); });
    if (hasMarket) lanes.push({label: "market price", market: true});
    data.owners.forEach(function (o, j) {
      if (picked === null || picked.indexOf(o) >= 0) lanes.push({label: data.names[j], owner: o});
    });
    ctx.font = "11px system-ui, sans-serif";
    left = PAD + Math.max.apply(null, lanes.map(function (l) { return ctx.measureText(l.label).width; })
                                        .concat([40])) + PAD;  // names are never clipped
    var ratio = window.devicePixelRatio || 1, width = root.clientWidth || 800;
    var height = AXIS + lanes.length * LANE + PAD;
    canvas.width = width * ratio; canvas.height = height * ratio;
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  }
  function laneIndex(i) {
    for (var j = 0; j < lanes.length; j++) {
      var l = lanes[j];
      if (l.owner !== undefined && S.owner[i] === l.owner) return j;
      if (l.channel !== undefined && S.kind[i] === K.collision_window && S.channel[i] === l.channel) return j;
      if (l.market && S.kind[i] === K.price_period) return j;
    }
    return -1;
  }
  var laneCache = null;
  function laneOfSpan(i) {
    if (laneCache === null) { laneCache = new Int32Array(S.s.length); for (var n = 0; n < S.s.length; n++) laneCache[n] = laneIndex(n); }
    return laneCache[i];
  }
  function xOf(t) { return left + (t - view[0]) / (view[1] - view[0]) * (canvas.clientWidth - left - PAD); }
  function tOf(x) { return view[0] + (x - left) / (canvas.clientWidth - left - PAD) * (view[1] - view[0]); }
  function yOf(lane) { return AXIS + lane * LANE; }
  // What a span looks like: [top offset, height, colour] within its lane.
  function look(i) {
    var k = S.kind[i], out = data.outcomes[S.out[i]];
    if (k === K.outage) return [0, LANE - 1, "#dddddd"];
    if (k === K.budget_exhausted) return [0, LANE - 1, "#f1e6f7"];
    if (k === K.membership) return [0, 2, "#9ecae1"];
    if (k === K.price_period) return [2, LANE - 5, "#fdd0a2"];
    if (k === K.collision_window) return [2, LANE - 5, COLOURS.lost_collision];
    if (k === K.exchange) return [3, LANE - 7, COLOURS[out] || "#7f7f7f"];
    if (k === K.transmission) return [LANE - 5, 3, out === "lost_collision" ? "#7f0000" : "#08306b"];
    if (k === K.backoff) return [LANE - 5, 3, "#e6c200"];
    return [3, LANE - 7, "#7f7f7f"];
  }
  var ORDER = [K.outage, K.budget_exhausted, K.membership, K.price_period, K.collision_window, K.exchange,
               K.backoff, K.transmission];
  function draw() {
    var w = canvas.clientWidth;
    ctx.clearRect(0, 0, w, canvas.clientHeight);
    ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.fillStyle = "#222";
    lanes.forEach(function (l, j) {
      ctx.fillStyle = j % 2 ? "#fafafa" : "#ffffff"; ctx.fillRect(left, yOf(j), w - left - PAD, LANE);
      ctx.fillStyle = "#222"; ctx.fillText(l.label, PAD, yOf(j) + LANE / 2);
    });
    ctx.save(); ctx.beginPath(); ctx.rect(left, 0, w - left - PAD, canvas.clientHeight); ctx.clip();
    ORDER.forEach(function (kind) {
      for (var i = 0; i < S.s.length; i++) {
        if (S.kind[i] !== kind || S.e[i] < view[0] || S.s[i] > view[1]) continue;
        var lane = laneOfSpan(i);
        if (lane < 0) continue;
        var g = look(i), x0 = xOf(S.s[i]), x1 = Math.max(xOf(S.e[i]), x0 + 1);
        ctx.fillStyle = g[2]; ctx.fillRect(x0, yOf(lane) + g[0], x1 - x0, g[1]);
        if (kind === K.transmission && data.outcomes[S.out[i]] === "lost_collision") {  // a collision: a red cross
          var cx = xOf(S.e[i]), cy = yOf(lane) + LANE / 2;
          ctx.strokeStyle = COLOURS.lost_collision; ctx.beginPath();
          ctx.moveTo(cx - 3, cy - 3); ctx.lineTo(cx + 3, cy + 3); ctx.moveTo(cx - 3, cy + 3); ctx.lineTo(cx + 3, cy - 3);
          ctx.stroke();
        }
      }
    });
    ctx.restore();
    axis(w);
  }
  function axis(w) {
    var span = view[1] - view[0], step = Math.pow(10, Math.floor(Math.log10(span / 6)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= 8) { step *= m; return true; } return false; });
    ctx.fillStyle = "#444"; ctx.strokeStyle = "#bbb"; ctx.textBaseline = "top";
    for (var t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) {
      var x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, AXIS - 4); ctx.lineTo(x, AXIS); ctx.stroke();
      ctx.fillText(+t.toPrecision(10) + "", x - 8, 4);
    }
    ctx.fillText("simulated time", PAD, 4);
  }
  function spanAt(x, y) {
    var lane = Math.floor((y - AXIS) / LANE);
    if (lane < 0 || lane >= lanes.length || x < left) return -1;
    var t0 = tOf(x - 2), t1 = tOf(x + 2), best = -1, rank = -1, dy = y - yOf(lane);
    for (var i = 0; i < S.s.length; i++) {
      if (S.e[i] < t0 || S.s[i] > t1 || laneOfSpan(i) !== lane) continue;
      var g = look(i);
      if (dy < g[0] - 1 || dy > g[0] + g[1] + 1) continue;  // the bar as drawn, not the whole lane
      var r = ORDER.indexOf(S.kind[i]);  // the one drawn on top wins
      if (r > rank) { rank = r; best = i; }
    }
    return best;
  }
  function details(i) {
    var lines = [data.kinds[S.kind[i]].replace("_", " ") + (S.out[i] ? ": " + data.outcomes[S.out[i]] : "")];
    if (S.owner[i] >= 0) lines.push("owner " + data.names[laneOf[S.owner[i]]] + " (" + S.owner[i] + ")");
    if (S.channel[i] >= 0) lines.push("channel " + S.channel[i]);
    if (S.k[i] !== null) lines.push("update k = " + S.k[i]);
    lines.push("from " + S.s[i] + " to " + S.e[i] + " (" + +(S.e[i] - S.s[i]).toPrecision(4) + ")");
    if (S.eps[i] !== null) lines.push("epsilon spent " + S.eps[i]);
    return lines.join("\n");
  }
  function zoom(factor, at) {
    var t = tOf(at), lo = t - (t - view[0]) * factor, hi = t + (view[1] - t) * factor;
    var full = data.end > 0 ? data.end : 1, width = Math.min(Math.max(hi - lo, full * 1e-9), full);
    lo = Math.max(0, Math.min(lo, full - width));
    view = [lo, lo + width]; draw();
  }
  canvas.addEventListener("wheel", function (e) {
    e.preventDefault(); zoom(Math.pow(1.0015, e.deltaY), e.offsetX);
  }, {passive: false});
  var dragging = null;
  canvas.addEventListener("mousedown", function (e) { dragging = [e.offsetX, view[0], view[1]]; });
  window.addEventListener("mouseup", function () { dragging = null; });
  canvas.addEventListener("mousemove", function (e) {
    if (dragging) {
      var dt = (e.offsetX - dragging[0]) / (canvas.clientWidth - left - PAD) * (dragging[2] - dragging[1]);
      var full = data.end > 0 ? data.end : 1, width = dragging[2] - dragging[1];
      var lo = Math.max(0, Math.min(dragging[1] - dt, full - width));
      view = [lo, lo + width]; draw(); return;
    }
    var i = spanAt(e.offsetX, e.offsetY);
    if (i < 0) { tip.style.display = "none"; return; }
    api.hovered = details(i);
    tip.textContent = api.hovered; tip.style.display = "block";
    tip.style.left = (e.offsetX + 14) + "px"; tip.style.top = (e.offsetY + 14) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  canvas.addEventListener("dblclick", function () { view = [0, data.end > 0 ? data.end : 1]; draw(); });
  root.querySelector(".dpm-reset").addEventListener("click", function () { view = [0, data.end > 0 ? data.end : 1]; draw(); });
  root.querySelector(".dpm-in").addEventListener("click", function () { zoom(0.5, (left + canvas.clientWidth) / 2); });
  root.querySelector(".dpm-out").addEventListener("click", function () { zoom(2, (left + canvas.clientWidth) / 2); });
  data.owners.forEach(function (o, j) {
    var option = document.createElement("option"); option.value = o; option.textContent = data.names[j];
    picker.appendChild(option);
  });
  picker.addEventListener("change", function () {
    var chosen = Array.prototype.filter.call(picker.options, function (o) { return o.selected; })
      .map(function (o) { return +o.value; });
    picked = chosen.length ? chosen : null; laneCache = null; layout(); draw();
  });
  window.addEventListener("resize", function () { layout(); draw(); });
  api = window.dpmarketTimeline = {
    lanes: function () { return lanes.map(function (l) { return l.label; }); },
    view: function () { return view.slice(); },
    xOf: xOf, yOf: function (lane) { return yOf(lane) + LANE / 2; }, spans: S, laneOfSpan: laneOfSpan,
    hovered: null, ready: false,
    show: function (t0, t1) {  // the view [t0, t1] (within the run)
      var full = data.end > 0 ? data.end : 1;
      view = [Math.max(0, t0), Math.min(full, t1)]; draw();
    }
  };
  layout(); draw();
  api.ready = true;
})();
