// src/cli/svg.hpp — a very small SVG writer for `pipetrain plot`: shapes and text appended in
// order, every text and attribute escaped, numbers short. It is not a plotting library: the
// charts (axes, timelines) are drawn with it in src/cli/plot.cpp.
#pragma once
#include <string>
#include <vector>

namespace pt {

// Text made safe for XML content and quoted attributes (& < > " ').
std::string xml_escape(const std::string& text);
// A number as SVG wants it: no exponent for ordinary sizes, at most 2 decimals.
std::string svg_number(double x);
// About `n` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten).
std::vector<double> nice_ticks(double lo, double hi, int n = 5);

class Svg {
 public:
    Svg(double width, double height);
    // `attrs` is extra attribute text, already escaped (e.g. class="F").
    void rect(double x, double y, double w, double h, const std::string& fill, const std::string& attrs = "");
    void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1);
    void polyline(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& stroke);
    void circle(double cx, double cy, double r, const std::string& fill);
    // anchor: start, middle or end.
    void text(double x, double y, const std::string& text, double size = 11, const std::string& anchor = "start",
              const std::string& attrs = "");
    void raw(const std::string& element) { body_ += element + "\n"; }   // e.g. <defs> written by the caller
    std::string str() const;   // the whole document

 private:
    double width_, height_;
    std::string body_;
};

}  // namespace pt
