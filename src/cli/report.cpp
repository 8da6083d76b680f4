#include "cli/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fileio.h"
#include "core/log.h"

namespace parallm::cli {

namespace {

namespace fs = std::filesystem;
using Points = std::vector<std::pair<double, double>>;

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
// The plot box inside each 640 x 300 svg.
constexpr double kLeft = 72, kTop = 28, kWidth = 548, kHeight = 222;

struct Run {
  std::string dir, label, color;
  std::vector<nlohmann::json> train, eval;
  nlohmann::json config, memory;
  size_t stride = 1;  // every stride-th record is drawn
};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

nlohmann::json read_json_if(const fs::path& p) {
  if (!fs::exists(p)) return nullptr;
  return nlohmann::json::parse(read_text_file(p.string(), "report"), nullptr, false);
}

Run load_run(const std::string& dir) {
  Run r;
  r.dir = dir;
  const fs::path m = fs::path(dir) / "metrics.jsonl";
  PARALLM_CHECK(fs::exists(m), IoError, "report", "{} has no metrics.jsonl: not a run directory (train.out_dir)", dir);
  std::ifstream in(m);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    auto j = nlohmann::json::parse(line, nullptr, false);
    const bool record = j.is_object() && j.contains("step");
    if (!record && in.eof()) {  // the last line, with no newline yet: a run still writing it
      log::warn("{} line {} is partly written (the run is still writing it?): skipped", m.string(), n);
      break;
    }
    PARALLM_CHECK(record, IoError, "report", "{} line {} is not a metrics record", m.string(), n);
    (j.value("kind", "") == "eval" ? r.eval : r.train).push_back(std::move(j));
  }
  r.config = read_json_if(fs::path(dir) / "config.json");
  r.memory = read_json_if(fs::path(dir) / "memory.json");
  r.stride = std::max<size_t>(1, (r.train.size() + kMaxPoints - 1) / kMaxPoints);
  return r;
}

// (x, y) of the records holding `metric`, every stride-th; x is the step, or with `by_tokens` the tokens read so far.
Points series(const Run& r, const std::vector<nlohmann::json>& recs, const std::string& metric, bool by_tokens,
              size_t stride) {
  // Tokens per step from the train records: tokens_per_s x dt.
  std::map<int64_t, double> tokens_at;
  double total = 0;
  for (const auto& t : r.train) {
    total += std::round(t.value("tokens_per_s", 0.0) * t.value("dt_ms", 0.0) / 1e3);
    tokens_at[t["step"].get<int64_t>()] = total;
  }
  Points p;
  for (size_t i = 0; i < recs.size(); i += stride) {
    const auto& j = recs[i];
    if (!j.contains(metric) || !j[metric].is_number()) continue;
    const int64_t step = j["step"].get<int64_t>();
    double x = static_cast<double>(step);
    if (by_tokens) {  // an evaluation at step s has read the tokens of steps before s
      const auto it = tokens_at.lower_bound(step);
      x = it == tokens_at.begin() ? 0 : std::prev(it)->second;
    }
    const double y = j[metric].get<double>();
    if (std::isfinite(y)) p.emplace_back(x, y);
  }
  return p;
}

struct Series {
  const Run* run;
  std::string metric;
  bool dashed = false;
  Points pts;
};

std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  double step = std::pow(10.0, std::floor(std::log10(span / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 6) {
      step *= m;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string line_plot(const std::string& title, const std::string& xlabel, const std::vector<Series>& all) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : all)
    for (const auto& [x, y] : s.pts) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::string out = fmt::format("<figure><figcaption>{}</figcaption>\n", esc(title));
  if (!std::isfinite(x0)) return out + "<p class=\"none\">not recorded</p></figure>\n";
  if (x1 == x0) x0 -= 1, x1 += 1;
  const double pad = y1 > y0 ? (y1 - y0) * 0.05 : std::max(std::abs(y0) * 0.1, 0.5);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kWidth; };
  auto py = [&](double y) { return kTop + kHeight - (y - y0) / (y1 - y0) * kHeight; };
  out += fmt::format(
      "<svg class=\"plot\" viewBox=\"0 0 640 300\" width=\"640\" height=\"300\" data-domain=\"{:.17g} {:.17g} {:.17g} "
      "{:.17g}\" data-box=\"{} {} {} {}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
      x0, x1, y0, y1, kLeft, kTop, kWidth, kHeight);
  out +=
      fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"box\"/>\n", kLeft, kTop, kWidth, kHeight);
  for (double t : ticks(y0, y1))
    out += fmt::format(
        "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.2f}\" y2=\"{:.2f}\"/><text class=\"yt\" x=\"{}\" "
        "y=\"{:.2f}\">{:.4g}</text>\n",
        kLeft, kLeft + kWidth, py(t), py(t), kLeft - 6, py(t) + 4, t);
  for (double t : ticks(x0, x1))
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.2f}\" x2=\"{:.2f}\" y1=\"{}\" y2=\"{}\"/><text class=\"xt\" "
        "x=\"{:.2f}\" y=\"{}\">{:.4g}</text>\n",
        px(t), px(t), kTop, kTop + kHeight, px(t), kTop + kHeight + 16, t);
  out += fmt::format("<text class=\"xl\" x=\"{}\" y=\"{}\">{}</text>\n", kLeft + kWidth / 2, kTop + kHeight + 36,
                     esc(xlabel));
  for (const auto& s : all) {
    std::string pts;
    for (const auto& [x, y] : s.pts) pts += fmt::format("{:.2f},{:.2f} ", px(x), py(y));
    out +=
        fmt::format("<polyline data-run=\"{}\" data-metric=\"{}\" data-stride=\"{}\" stroke=\"{}\"{} points=\"{}\"/>\n",
                    esc(s.run->label), esc(s.metric), s.metric.rfind("eval/", 0) == 0 ? 1 : s.run->stride, s.run->color,
                    s.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
  }
  return out + "</svg></figure>\n";
}

// One plot of `metrics` ("train/loss", "eval/val_loss", ...) for every run.
std::string plot(const std::vector<Run>& runs, const std::string& title, const std::vector<std::string>& metrics,
                 bool by_tokens = false) {
  std::vector<Series> all;
  for (const auto& r : runs)
    for (const auto& m : metrics) {
      const bool eval = m.rfind("eval/", 0) == 0;
      const std::string field = m.substr(m.find('/') + 1);
      Series s{&r, m, eval, series(r, eval ? r.eval : r.train, field, by_tokens, eval ? 1 : r.stride)};
      if (!s.pts.empty()) all.push_back(std::move(s));
    }
  return line_plot(title, by_tokens ? "tokens" : "step", all);
}

bool ends_with_bytes(const std::string& s) {
  return s.size() > 6 && s.compare(s.size() - 6, 6, "_bytes") == 0;
}

std::string memory_chart(const std::vector<Run>& runs) {
  std::vector<std::string> cats;
  for (const auto& r : runs)
    if (r.memory.is_object())
      for (const auto& [k, v] : r.memory.items())
        if (k != "step" && k != "total_peak_bytes" && v.is_number() &&
            std::find(cats.begin(), cats.end(), k) == cats.end())
          cats.push_back(k);
  std::string out = "<figure><figcaption>peak memory by category (MiB, memory.json)</figcaption>\n";
  if (cats.empty()) return out + "<p class=\"none\">not recorded</p></figure>\n";
  double mx = 1;
  for (const auto& r : runs)
    for (const auto& c : cats)
      if (r.memory.is_object()) mx = std::max(mx, r.memory.value(c, 0.0));
  const double row = 14.0 * static_cast<double>(runs.size()) + 8, h = row * static_cast<double>(cats.size()) + 20;
  out += fmt::format(
      "<svg class=\"bars\" viewBox=\"0 0 640 {0}\" width=\"640\" height=\"{0}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      h);
  for (size_t c = 0; c < cats.size(); ++c) {
    const double y = 10 + row * static_cast<double>(c);
    std::string name = cats[c].substr(0, cats[c].size() - (ends_with_bytes(cats[c]) ? 6 : 0));
    out += fmt::format("<text class=\"yt\" x=\"150\" y=\"{:.1f}\">{}</text>\n", y + row / 2, esc(name));
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!runs[i].memory.is_object()) continue;
      const double b = runs[i].memory.value(cats[c], 0.0);
      out += fmt::format(
          "<rect data-run=\"{}\" data-category=\"{}\" data-bytes=\"{:.0f}\" x=\"156\" y=\"{:.1f}\" width=\"{:.2f}\" "
          "height=\"12\" fill=\"{}\"/><text class=\"val\" x=\"{:.2f}\" y=\"{:.1f}\">{:.1f}</text>\n",
          esc(runs[i].label), esc(name), b, y + 14.0 * static_cast<double>(i), 420 * b / mx, runs[i].color,
          160 + 420 * b / mx, y + 14.0 * static_cast<double>(i) + 10, b / 1048576.0);
    }
  }
  return out + "</svg></figure>\n";
}

std::string cfg_text(const Run& r) {
  if (!r.config.is_object()) return "?";
  auto v = [&](const char* k) { return r.config.contains(k) ? r.config[k].dump() : std::string("?"); };
  return fmt::format("{}L {}H {}C, block {}, vocab {}, batch {} x gas {}", v("model.n_layer"), v("model.n_head"),
                     v("model.n_embd"), v("model.block_size"), v("model.vocab_size"), v("model.batch_size"),
                     v("optimizer.gas"));
}

std::string runs_table(const std::vector<Run>& runs) {
  std::string out =
      "<table><tr><th></th><th>run</th><th>model</th><th>steps</th><th>last val loss</th><th>best val "
      "loss</th><th>mean tokens/s</th></tr>\n";
  for (const auto& r : runs) {
    double best = std::numeric_limits<double>::infinity(), last = best, tok = 0;
    for (const auto& e : r.eval)
      if (e.contains("val_loss"))
        best = std::min(best, e["val_loss"].get<double>()), last = e["val_loss"].get<double>();
    for (const auto& t : r.train) tok += t.value("tokens_per_s", 0.0);
    const std::string steps =
        r.train.empty() ? "0" : fmt::format("{} to {}", r.train.front()["step"].dump(), r.train.back()["step"].dump());
    out += fmt::format(
        "<tr><td><span class=\"sw\" style=\"background:{}\"></span></td><td title=\"{}\">{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{:.0f}</td></tr>\n",
        r.color, esc(r.dir), esc(r.label), esc(cfg_text(r)), steps,
        std::isfinite(last) ? fmt::format("{:.4f}", last) : "-",
        std::isfinite(best) ? fmt::format("{:.4f}", best) : "-",
        r.train.empty() ? 0.0 : tok / static_cast<double>(r.train.size()));
  }
  return out + "</table>\n";
}

}  // namespace

std::string run_report_html(const std::vector<std::string>& dirs) {
  PARALLM_CHECK(!dirs.empty(), ConfigError, "report", "no run directory given");
  std::vector<Run> runs;
  for (const auto& d : dirs) runs.push_back(load_run(d));
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].color = kPalette[i % std::size(kPalette)];
    runs[i].label = fs::path(runs[i].dir).lexically_normal().filename().string();
    if (runs[i].label.empty())
      runs[i].label = fs::path(runs[i].dir).lexically_normal().parent_path().filename().string();
    for (size_t j = 0; j < i; ++j)
      if (runs[j].label == runs[i].label) runs[i].label = runs[i].dir;  // two runs of one name: the paths
  }
  std::string note;
  for (const auto& r : runs)
    if (r.stride > 1)
      note += fmt::format("<p class=\"note\">{}: {} train records, every {}th drawn.</p>\n", esc(r.label),
                          r.train.size(), r.stride);
  std::string body = "<h1>parallm run report</h1>\n" + runs_table(runs) + note;
  body += "<p class=\"note\">Solid: train records; dashed: evaluations (val loss).</p>\n<div class=\"grid\">\n";
  body += plot(runs, "loss (train) and val loss against steps", {"train/loss", "eval/val_loss"});
  body += plot(runs, "loss (train) and val loss against tokens", {"train/loss", "eval/val_loss"}, true);
  body += plot(runs, "learning rate", {"train/lr"});
  body += plot(runs, "tokens/s", {"train/tokens_per_s"});
  body += plot(runs, "MFU (model FLOPs utilization)", {"train/mfu"});
  body += plot(runs, "gradient norm", {"train/grad_norm"});
  body += plot(runs, "step time of the slowest and fastest rank (ms)", {"train/step_ms_max", "train/step_ms_min"});
  const bool moe = std::any_of(runs.begin(), runs.end(), [](const auto& r) {
    return !r.train.empty() && r.train.front().contains("moe_imbalance");
  });
  if (moe) {  // mixtures of experts (docs/moe.md): how evenly the experts are used, and the balancing terms
    body += plot(runs, "MoE: tokens per expert, max / mean (the worst layer)", {"train/moe_imbalance"});
    body += plot(runs, "MoE: balancing loss and router z-loss", {"train/moe_aux_loss", "train/moe_z_loss"});
  }
  body += memory_chart(runs);
  body += "</div>\n";
  const char* css =
      "body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}table{border-collapse:collapse;"
      "margin-bottom:12px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}.sw{display:inline-block;"
      "width:14px;height:14px}.grid{display:grid;grid-template-columns:repeat(auto-fill,660px);gap:8px}figure{"
      "margin:0}figcaption{font-size:14px;font-weight:bold}.box{fill:none;stroke:#888}.grid line,line.grid{stroke:"
      "#e4e4e4}polyline{fill:none;stroke-width:1.6}text{font-size:11px;fill:#444}.yt{text-anchor:end}.xt,.xl{"
      "text-anchor:middle}.note,.none{font-size:12px;color:#666}";
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>parallm run report</title>"
      "<style>{}</style></head>\n<body>\n{}</body></html>\n",
      css, body);
}

}  // namespace parallm::cli
