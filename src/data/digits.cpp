// Digit images (make_digit_images, docs/data.md "Digit images"): each digit is a few pen
// strokes (polylines) in a glyph box; a sample bends the strokes smoothly, slants, stretches,
// scales, rotates and places the glyph at random, draws the strokes with an anti-aliased pen
// of random width and ink, and adds Gaussian pixel noise. Everything a sample draws comes from
// its own stream, keyed by (seed, first + i), so any sample can be made on its own.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "data/random_stream.hpp"

namespace antdt::data {

namespace {

struct Point {
  double x;
  double y;
};
using Stroke = std::vector<Point>;
using Glyph = std::vector<Stroke>;

constexpr double kPi = 3.141592653589793;

// Glyph space: x in [-0.5, 0.5] to the right, y in [-1, 1] downwards (image rows), so an
// angle of 90 degrees points down and 270 up.
Stroke arc(double cx, double cy, double rx, double ry, double from_deg, double to_deg) {
  const int steps = std::max(2, static_cast<int>(std::abs(to_deg - from_deg) / 15.0 + 0.5));
  Stroke out;
  for (int k = 0; k <= steps; ++k) {
    const double a = (from_deg + (to_deg - from_deg) * k / steps) * kPi / 180.0;
    out.push_back({cx + rx * std::cos(a), cy + ry * std::sin(a)});
  }
  return out;
}

// A quadratic Bezier curve from a through control c to b.
Stroke curve(Point a, Point c, Point b) {
  Stroke out;
  constexpr int kSteps = 8;
  for (int k = 0; k <= kSteps; ++k) {
    const double t = static_cast<double>(k) / kSteps;
    const double u = 1.0 - t;
    out.push_back({u * u * a.x + 2 * u * t * c.x + t * t * b.x, u * u * a.y + 2 * u * t * c.y + t * t * b.y});
  }
  return out;
}

Stroke join(Stroke a, const Stroke& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::array<Glyph, 10>& glyphs() {
  static const std::array<Glyph, 10> g = {
      Glyph{arc(0, 0, 0.48, 0.95, 0, 360)},
      Glyph{{{-0.22, -0.62}, {0.05, -0.95}, {0.05, 0.95}}},
      Glyph{join(arc(0, -0.47, 0.45, 0.48, 190, 390), {{-0.5, 0.95}, {0.52, 0.95}})},
      Glyph{join(arc(0, -0.52, 0.42, 0.43, 200, 450), arc(0, 0.45, 0.48, 0.5, -90, 160))},
      Glyph{{{0.25, 0.95}, {0.25, -0.95}, {-0.5, 0.35}, {0.52, 0.35}}},
      Glyph{join({{0.45, -0.95}, {-0.3, -0.95}, {-0.38, -0.08}}, arc(0, 0.42, 0.48, 0.52, 235, 510))},
      Glyph{join(curve({0.38, -0.95}, {-0.55, -0.55}, {-0.46, 0.45}), arc(0, 0.45, 0.46, 0.5, 180, 540))},
      Glyph{{{-0.5, -0.95}, {0.5, -0.95}, {-0.05, 0.95}}},
      Glyph{arc(0, -0.5, 0.38, 0.45, 0, 360), arc(0, 0.45, 0.47, 0.5, 0, 360)},
      Glyph{arc(0, -0.42, 0.45, 0.5, 0, 360), {{0.45, -0.42}, {0.3, 0.95}}},
  };
  return g;
}

// Draws segment p-q with a pen of half-width hw and the given ink into img (size x size,
// row-major), keeping the larger value where strokes overlap. The pen's edge is one pixel of
// linear ramp, so strokes are anti-aliased.
void draw_segment(float* img, int size, Point p, Point q, double hw, double ink) {
  const double reach = hw + 1.0;
  const int x0 = std::max(0, static_cast<int>(std::floor(std::min(p.x, q.x) - reach)));
  const int x1 = std::min(size - 1, static_cast<int>(std::ceil(std::max(p.x, q.x) + reach)));
  const int y0 = std::max(0, static_cast<int>(std::floor(std::min(p.y, q.y) - reach)));
  const int y1 = std::min(size - 1, static_cast<int>(std::ceil(std::max(p.y, q.y) + reach)));
  const double dx = q.x - p.x;
  const double dy = q.y - p.y;
  const double len2 = dx * dx + dy * dy;
  for (int y = y0; y <= y1; ++y) {
    for (int x = x0; x <= x1; ++x) {
      const double px = x + 0.5 - p.x;
      const double py = y + 0.5 - p.y;
      const double t = len2 > 0 ? std::clamp((px * dx + py * dy) / len2, 0.0, 1.0) : 0.0;
      const double ex = px - t * dx;
      const double ey = py - t * dy;
      const double d = std::sqrt(ex * ex + ey * ey);
      const double v = ink * std::clamp(hw + 0.5 - d, 0.0, 1.0);
      float& cell = img[static_cast<std::size_t>(y) * static_cast<std::size_t>(size) + static_cast<std::size_t>(x)];
      cell = std::max(cell, static_cast<float>(v));
    }
  }
}

// One sample: its class and its pixels (img is zeroed by the caller).
std::int32_t draw_digit(synth::Stream& s, const DigitImageSpec& spec, float* img) {
  const auto label = static_cast<std::int32_t>(s.next() % static_cast<std::uint64_t>(spec.classes));
  const double size = spec.size;
  // Shape: smooth bends of the strokes (glyph units), slant, width stretch.
  const double bend_x = s.uniform(-0.09, 0.09);
  const double bend_y = s.uniform(-0.07, 0.07);
  const double freq_x = s.uniform(1.0, 2.5);
  const double freq_y = s.uniform(1.0, 2.5);
  const double phase_x = s.uniform(0.0, 2 * kPi);
  const double phase_y = s.uniform(0.0, 2 * kPi);
  const double slant = s.uniform(-0.3, 0.3);
  const double stretch = s.uniform(0.8, 1.2);
  // Placement: height about 0.68 of the image at scale 1, rotation, offset from the centre.
  const double unit = 0.34 * size * s.uniform(0.7, 1.05);
  const double angle = s.uniform(-12.0, 12.0) * kPi / 180.0;
  const double offset_x = s.uniform(-0.15, 0.15) * size;
  const double offset_y = s.uniform(-0.12, 0.12) * size;
  const double hw = s.uniform(0.7, 1.6) * size / 28.0;
  const double ink = s.uniform(0.75, 1.0);
  const double ca = std::cos(angle);
  const double sa = std::sin(angle);

  auto place = [&](Point g) {
    const double bx = g.x + bend_x * std::sin(freq_x * kPi * g.y + phase_x);
    const double by = g.y + bend_y * std::sin(freq_y * kPi * g.x + phase_y);
    const double sx = (bx * stretch - slant * by) * unit;
    const double sy = by * unit;
    return Point{ca * sx - sa * sy, sa * sx + ca * sy};
  };
  const Glyph& glyph = glyphs()[static_cast<std::size_t>(label)];
  std::vector<std::vector<Point>> placed;
  double lo_x = std::numeric_limits<double>::max(), hi_x = -lo_x, lo_y = lo_x, hi_y = -lo_x;
  for (const Stroke& stroke : glyph) {
    placed.emplace_back();
    for (const Point& g : stroke) {
      const Point p = place(g);
      placed.back().push_back(p);
      lo_x = std::min(lo_x, p.x), hi_x = std::max(hi_x, p.x);
      lo_y = std::min(lo_y, p.y), hi_y = std::max(hi_y, p.y);
    }
  }
  // Centre the glyph's box, add the offset, then shift back inside the image where the offset
  // would push ink over an edge.
  const double margin = hw + 1.0;
  auto shift = [&](double lo, double hi, double offset) {
    double centre = size / 2 - (lo + hi) / 2 + offset;
    centre = std::min(centre, size - margin - hi);
    centre = std::max(centre, margin - lo);
    return centre;
  };
  const double cx = shift(lo_x, hi_x, offset_x);
  const double cy = shift(lo_y, hi_y, offset_y);
  for (const auto& stroke : placed) {
    for (std::size_t k = 1; k < stroke.size(); ++k) {
      draw_segment(img, spec.size, {stroke[k - 1].x + cx, stroke[k - 1].y + cy}, {stroke[k].x + cx, stroke[k].y + cy},
                   hw, ink);
    }
  }
  // Clutter: up to two short stray strokes, fainter than the digit.
  const int strays = static_cast<int>(s.next() % 3);
  for (int k = 0; k < strays; ++k) {
    const Point a{s.uniform(0.0, size), s.uniform(0.0, size)};
    const double length = s.uniform(0.1, 0.25) * size;
    const double direction = s.uniform(0.0, 2 * kPi);
    draw_segment(img, spec.size, a, {a.x + length * std::cos(direction), a.y + length * std::sin(direction)}, hw,
                 ink * s.uniform(0.3, 0.7));
  }
  if (spec.noise > 0) {
    const auto pixels = static_cast<std::size_t>(spec.size) * static_cast<std::size_t>(spec.size);
    for (std::size_t k = 0; k < pixels; ++k) {
      img[k] = std::clamp(img[k] + static_cast<float>(spec.noise * s.normal()), 0.0f, 1.0f);
    }
  }
  return label;
}

}  // namespace

InMemoryDataset make_digit_images(const DigitImageSpec& spec) {
  if (spec.samples < 1 || spec.classes < 2 || spec.classes > 10 || spec.size < 8 || spec.size > 256 ||
      !(spec.noise >= 0.0f) || !std::isfinite(spec.noise) || spec.first < 0 ||
      spec.first > std::numeric_limits<std::int64_t>::max() - spec.samples) {
    throw UsageError(
        "data: digit images need samples >= 1, classes in [2, 10], size in [8, 256], a finite "
        "noise >= 0 and first >= 0 (got " +
        std::to_string(spec.samples) + ", " + std::to_string(spec.classes) + ", " + std::to_string(spec.size) + ", " +
        std::to_string(spec.noise) + ", " + std::to_string(spec.first) + ")");
  }
  const auto pixels = static_cast<std::size_t>(spec.size) * static_cast<std::size_t>(spec.size);
  std::vector<float> features(static_cast<std::size_t>(spec.samples) * pixels, 0.0f);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(spec.samples));
  const std::uint64_t key = synth::mix(spec.seed ^ 0x4449474954530A00ULL);
  for (std::int64_t i = 0; i < spec.samples; ++i) {
    synth::Stream s(key ^ synth::mix(static_cast<std::uint64_t>(spec.first + i)));
    labels[static_cast<std::size_t>(i)] = draw_digit(s, spec, features.data() + static_cast<std::size_t>(i) * pixels);
  }
  InMemoryDataset out(std::move(features), std::move(labels), static_cast<std::int64_t>(pixels), spec.classes);
  out.set_sample_shape({1, spec.size, spec.size});
  return out;
}

}  // namespace antdt::data
