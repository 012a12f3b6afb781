#include "src/cli/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pt {

std::string xml_escape(const std::string& text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default:   // XML 1.0 allows no control character but tab and newline
                out += static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' ? ' ' : c;
        }
    }
    return out;
}

std::string svg_number(double x) {
    char b[40];
    if (!std::isfinite(x)) x = 0;
    std::snprintf(b, sizeof b, std::fabs(x) < 1e9 ? "%.2f" : "%.4e", x);
    std::string s = b;
    if (s.find('.') != std::string::npos && s.find('e') == std::string::npos) {   // 12.50 -> 12.5, 3.00 -> 3
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
    }
    return s == "-0" ? "0" : s;
}

std::vector<double> nice_ticks(double lo, double hi, int n) {
    if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
    double raw = (hi - lo) / std::max(n, 1), p = std::pow(10.0, std::floor(std::log10(raw)));
    double step = raw / p < 1.5 ? p : raw / p < 3 ? 2 * p : raw / p < 7 ? 5 * p : 10 * p;
    std::vector<double> ticks;
    for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
    return ticks;
}

Svg::Svg(double width, double height) : width_(width), height_(height) {}

void Svg::rect(double x, double y, double w, double h, const std::string& fill, const std::string& attrs) {
    body_ += "<rect x=\"" + svg_number(x) + "\" y=\"" + svg_number(y) + "\" width=\"" + svg_number(std::max(w, 0.0)) +
             "\" height=\"" + svg_number(std::max(h, 0.0)) + "\" fill=\"" + xml_escape(fill) + "\"" +
             (attrs.empty() ? "" : " " + attrs) + "/>\n";
}

void Svg::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width) {
    body_ += "<line x1=\"" + svg_number(x1) + "\" y1=\"" + svg_number(y1) + "\" x2=\"" + svg_number(x2) + "\" y2=\"" +
             svg_number(y2) + "\" stroke=\"" + xml_escape(stroke) + "\" stroke-width=\"" + svg_number(width) + "\"/>\n";
}

void Svg::polyline(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& stroke) {
    std::string points;
    for (size_t i = 0; i < xs.size() && i < ys.size(); i++) points += (i ? " " : "") + svg_number(xs[i]) + "," + svg_number(ys[i]);
    body_ += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + xml_escape(stroke) + "\" stroke-width=\"1.5\"/>\n";
}

void Svg::circle(double cx, double cy, double r, const std::string& fill) {
    body_ += "<circle cx=\"" + svg_number(cx) + "\" cy=\"" + svg_number(cy) + "\" r=\"" + svg_number(r) + "\" fill=\"" +
             xml_escape(fill) + "\"/>\n";
}

void Svg::text(double x, double y, const std::string& text, double size, const std::string& anchor, const std::string& attrs) {
    body_ += "<text x=\"" + svg_number(x) + "\" y=\"" + svg_number(y) + "\" font-size=\"" + svg_number(size) +
             "\" text-anchor=\"" + xml_escape(anchor) + "\"" + (attrs.empty() ? "" : " " + attrs) + ">" + xml_escape(text) +
             "</text>\n";
}

std::string Svg::str() const {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
           svg_number(width_) + "\" height=\"" + svg_number(height_) + "\" viewBox=\"0 0 " + svg_number(width_) + " " +
           svg_number(height_) + "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" +
           body_ + "</svg>\n";
}

}  // namespace pt
