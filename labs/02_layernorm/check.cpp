// labs/02_layernorm/check.cpp — lab 02's check: scripts/lab.sh check 02 (or build/lab_02).
// build/lab_02 --fd-sweep measures the deliverable (finite differences of the fp32 forward, as the
// step h shrinks, against your dinp).
//
// References, none of them your code: central differences of a float64 LayerNorm forward written
// below (task 1), and the spec, ops::layernorm_backward (tasks 2 and 3). When yours differs, the
// check computes the usual mistaken versions (also below) and says which one yours matches.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "kernels/ops.hpp"
#include "labs/02_layernorm/layernorm.hpp"
#include "labs/check.hpp"

using namespace labcheck;

namespace {

const float kEps = 1e-5f;   // the forward's (the model's layer_norm_eps)

// ---- one LayerNorm, its inputs -----------------------------------------------------------------
struct Data {
    int N, C;
    std::vector<float> inp, weight, bias, dout, mean, rstd;   // (N, C), (C), (C), (N, C), (N), (N)
};

std::string sizes(int N, int C) { return "N=" + std::to_string(N) + ", C=" + std::to_string(C); }

// Rows with an offset and a scale of their own, so that mean and rstd matter; mean and rstd from
// the spec's forward.
Data make_data(int N, int C, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Data d{N, C, {}, {}, {}, {}, {}, {}};
    d.inp.resize((size_t)N * C), d.weight.resize((size_t)C), d.bias.resize((size_t)C);
    d.dout.resize((size_t)N * C), d.mean.resize((size_t)N), d.rstd.resize((size_t)N);
    for (int n = 0; n < N; n++) {
        const float offset = 3.0f * u(gen), scale = 1.5f + u(gen);
        for (int c = 0; c < C; c++) d.inp[(size_t)n * C + c] = offset + scale * u(gen);
    }
    for (float& w : d.weight) w = 1.0f + 0.5f * u(gen);
    for (float& b : d.bias) b = 0.5f * u(gen);
    for (float& g : d.dout) g = u(gen);
    std::vector<float> out((size_t)N * C);
    ops::layernorm_forward(out.data(), d.mean.data(), d.rstd.data(), d.inp.data(), d.weight.data(), d.bias.data(),
                           N, C, kEps);
    return d;
}

struct Grads {
    std::vector<float> dinp, dweight, dbias;
};

// What the gradients hold before a call: zeros, or numbers of their own (the adds test).
Grads start_grads(const Data& d, bool zero) {
    Grads g{std::vector<float>((size_t)d.N * d.C), std::vector<float>((size_t)d.C), std::vector<float>((size_t)d.C)};
    if (zero) return g;
    std::mt19937 gen(99);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto* v : {&g.dinp, &g.dweight, &g.dbias})
        for (float& x : *v) x = u(gen);
    return g;
}

std::vector<float>& part(Grads& g, int k) { return k == 0 ? g.dinp : k == 1 ? g.dweight : g.dbias; }
const std::vector<float>& part(const Grads& g, int k) { return k == 0 ? g.dinp : k == 1 ? g.dweight : g.dbias; }

const char* kNames[3] = {"dinp", "dweight", "dbias"};

void yours(Grads& g, const Data& d) {
    student::layernorm_backward(g.dinp.data(), g.dweight.data(), g.dbias.data(), d.dout.data(), d.inp.data(),
                                d.weight.data(), d.mean.data(), d.rstd.data(), d.N, d.C);
}

void spec(Grads& g, const Data& d) {
    ops::layernorm_backward(g.dinp.data(), g.dweight.data(), g.dbias.data(), d.dout.data(), d.inp.data(),
                            d.weight.data(), d.mean.data(), d.rstd.data(), d.N, d.C);
}

// ---- task 1: finite differences of a float64 forward -------------------------------------------
// L = sum over (n, c) of dout * out, out the LayerNorm of float64 copies of the inputs.
struct Forward64 {
    const Data& d;
    std::vector<double> inp, weight, bias;
    explicit Forward64(const Data& data)
        : d(data), inp(d.inp.begin(), d.inp.end()), weight(d.weight.begin(), d.weight.end()),
          bias(d.bias.begin(), d.bias.end()) {}
    double loss() const {
        double L = 0.0;
        for (int n = 0; n < d.N; n++) {
            const double* x = &inp[(size_t)n * d.C];
            double mean = 0.0, var = 0.0;
            for (int c = 0; c < d.C; c++) mean += x[c] / d.C;
            for (int c = 0; c < d.C; c++) var += (x[c] - mean) * (x[c] - mean) / d.C;
            const double rstd = 1.0 / std::sqrt(var + kEps);
            for (int c = 0; c < d.C; c++)
                L += d.dout[(size_t)n * d.C + c] * ((x[c] - mean) * rstd * weight[(size_t)c] + bias[(size_t)c]);
        }
        return L;
    }
    // dL/dv[i] for every i, by (L(v + h) - L(v - h)) / 2h.
    std::vector<double> central(std::vector<double>& v, double h) {
        std::vector<double> g(v.size());
        for (size_t i = 0; i < v.size(); i++) {
            const double saved = v[i];
            v[i] = saved + h;
            const double up = loss();
            v[i] = saved - h;
            g[i] = (up - loss()) / (2 * h);
            v[i] = saved;
        }
        return g;
    }
};

// Analytic gradients in double with one known mistake each (task 1's diagnosis).
struct Slip {
    std::string name, hint;
    bool no_mean_term = false, no_rstd_term = false, rstd_term_plus = false, no_weight = false, no_rstd_factor = false;
    bool dweight_of_inp = false, dbias_times_weight = false;
};

Grads slipped(const Data& d, const Slip& s) {
    Grads g = start_grads(d, true);
    for (int n = 0; n < d.N; n++) {
        std::vector<double> norm((size_t)d.C), dnorm((size_t)d.C);
        double m1 = 0.0, m2 = 0.0;
        for (int c = 0; c < d.C; c++) {
            const size_t i = (size_t)n * d.C + c;
            norm[(size_t)c] = ((double)d.inp[i] - d.mean[(size_t)n]) * d.rstd[(size_t)n];
            dnorm[(size_t)c] = (s.no_weight ? 1.0 : (double)d.weight[(size_t)c]) * d.dout[i];
            m1 += dnorm[(size_t)c] / d.C, m2 += dnorm[(size_t)c] * norm[(size_t)c] / d.C;
        }
        for (int c = 0; c < d.C; c++) {
            const size_t i = (size_t)n * d.C + c;
            double t = dnorm[(size_t)c];
            if (!s.no_mean_term) t -= m1;
            if (!s.no_rstd_term) t += (s.rstd_term_plus ? 1 : -1) * norm[(size_t)c] * m2;
            g.dinp[i] = float(s.no_rstd_factor ? t : t * d.rstd[(size_t)n]);
            g.dweight[(size_t)c] += float(d.dout[i] * (s.dweight_of_inp ? (double)d.inp[i] : norm[(size_t)c]));
            g.dbias[(size_t)c] += float(d.dout[i] * (s.dbias_times_weight ? (double)d.weight[(size_t)c] : 1.0));
        }
    }
    return g;
}

std::vector<Slip> slips() {
    std::vector<Slip> s(7);
    s[0].no_rstd_term = true;
    s[0].hint = "yours matches dinp without its third term, - norm * mean(dnorm * norm): the term through rstd is "
                "missing (rstd[n] depends on every input of the row too)";
    s[1].no_mean_term = true;
    s[1].hint = "yours matches dinp without - mean(dnorm): the term through mean[n] is missing (every input of the "
                "row moves the mean)";
    s[2].no_mean_term = s[2].no_rstd_term = true;
    s[2].hint = "yours matches dinp = rstd * dnorm: mean[n] and rstd[n] are not constants, both depend on every input "
                "of the row (two more terms)";
    s[3].rstd_term_plus = true;
    s[3].hint = "yours matches dinp with + norm * mean(dnorm * norm): that term is subtracted (a larger input makes "
                "the variance larger, so rstd smaller)";
    s[4].no_weight = true;
    s[4].hint = "yours matches weight = 1: the gradient reaching norm is dnorm = weight[c] * dout[n][c]";
    s[5].no_rstd_factor = true;
    s[5].hint = "yours matches dinp without the factor rstd[n]: d norm / d inp carries rstd[n]";
    s[6].dweight_of_inp = true;
    s[6].hint = "yours matches dweight = sum of dout * inp: out = norm * weight + bias, so dweight sums dout * norm, "
                "norm = (inp - mean) * rstd";
    return s;
}

// Largest |yours - reference| over the largest |reference|.
double relative_error(const std::vector<float>& y, const std::vector<double>& ref, size_t* worst = nullptr) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < y.size(); i++) {
        scale = std::max(scale, std::fabs(ref[i]));
        double e = std::isfinite(y[i]) ? std::fabs(y[i] - ref[i]) : 1e30;
        if (e <= diff) continue;
        diff = e;
        if (worst) *worst = i;
    }
    return diff / std::max(scale, 1e-30);
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::string at(size_t i, int cols) {
    return cols > 1 ? "(" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + ")" : std::to_string(i);
}

void task_finite_differences() {
    unsigned seed = 1;
    for (auto [N, C] : {std::array<int, 2>{5, 7}, {3, 50}, {2, 3}, {4, 33}}) {
        Data d = make_data(N, C, seed++);
        Grads g = start_grads(d, true);
        yours(g, d);
        Forward64 f(d);
        const double h = 1e-4;   // float64: truncation ~h^2 = 1e-8, rounding ~1e-16 / h = 1e-12
        const std::vector<double> fd[3] = {f.central(f.inp, h), f.central(f.weight, h), f.central(f.bias, h)};
        const std::vector<float>* mine[3] = {&g.dinp, &g.dweight, &g.dbias};
        for (int k = 0; k < 3; k++) {
            size_t i = 0;
            const double err = relative_error(*mine[k], fd[k], &i);
            if (err < 1e-3) continue;
            std::string differs = sizes(N, C) + ": element " + at(i, k == 0 ? C : 1) + " of " + kNames[k] + ": yours " +
                                  num((*mine[k])[i]) + ", finite differences " + num(fd[k][i]) +
                                  " (relative error of " + kNames[k] + " " + num(err) + ", allowed 1e-3)";
            std::string hint;
            const Grads right = slipped(d, Slip{});
            for (const Slip& s : slips()) {   // the slips that change this gradient
                const Grads w = slipped(d, s);
                if (relative_error(part(w, k), widen(part(right, k))) < 1e-3) continue;
                if (hint.empty() && relative_error(*mine[k], widen(part(w, k))) < 1e-4) hint = s.hint;
            }
            bool zero = std::all_of(mine[k]->begin(), mine[k]->end(), [](float x) { return x == 0.0f; });
            if (hint.empty() && zero)
                hint = std::string("your ") + kNames[k] + " is all zeros: write into it (+=)";
            if (hint.empty())
                hint = k == 0 ? "dinp[n][i] = sum over j of dnorm[j] * d norm[j] / d inp[i], with d norm[j] / d inp[i] "
                                "= rstd * (delta_ij - 1/C - norm[i] * norm[j] / C) (README: \"The derivation\")"
                              : std::string(kNames[k]) + " sums over the rows: " +
                                    (k == 1 ? "dweight[c] = sum over n of dout[n][c] * norm[n][c]"
                                            : "dbias[c] = sum over n of dout[n][c]");
            fail(differs, hint);
        }
    }
}

// ---- task 2: adds, and null pointers -----------------------------------------------------------
// Fails unless yours is close to expected (the spec: start + the gradient) for each wanted gradient
// and unchanged for the others; says which mistake it matches.
void check_added(const Grads& y, const Grads& expected, const Grads& start, const Grads& fresh, int cols,
                 const std::string& where, const bool given[3]) {
    for (int k = 0; k < 3; k++) {
        const std::vector<float>& mine = part(y, k);
        if (!given[k]) {   // not wanted: must hold what it held
            if (std::memcmp(mine.data(), part(start, k).data(), mine.size() * sizeof(float)))
                fail(where + ": " + kNames[k] + " was null, yet the buffer behind it changed",
                     "a null pointer means not wanted: write nothing there (if (" + std::string(kNames[k]) + ") ...)");
            continue;
        }
        size_t i = 0;
        if (relative_error(mine, widen(part(expected, k)), &i) < 1e-4) continue;
        const int c = k == 0 ? cols : 1;
        std::string differs = where + ": element " + at(i, c) + " of " + kNames[k] + ": yours " + num(mine[i]) +
                              ", expected " + num(part(expected, k)[i]) + " (it held " +
                              num(part(start, k)[i]) + " before the call)";
        if (relative_error(mine, widen(part(fresh, k))) < 1e-4)
            fail(differs, std::string("your ") + kNames[k] + " overwrites (=) what it held: every backward ADDS (+=) "
                          "into its gradients, so micro-batches and residual branches accumulate");
        if (relative_error(mine, widen(part(start, k))) < 1e-6)
            fail(differs, std::string("your ") + kNames[k] + " is unchanged: add the gradient into it (+=)" +
                              (given[0] && given[1] && given[2] ? "" : ", whether or not the others are wanted"));
        fail(differs, "the gradients it adds are wrong: make task 1 pass first");
    }
}

// Runs fn in a child process of its own: "" when it returned, else how it ended. Memory it writes
// must be MAP_SHARED to be seen here.
std::string in_child(const std::function<void()>& fn) {
    std::fflush(stdout), std::fflush(stderr);
    pid_t pid = ::fork();
    if (pid == 0) {
        try {
            fn();
        } catch (const NotImplemented&) {
            ::_exit(3);
        } catch (...) {
            ::_exit(4);
        }
        ::_exit(0);
    }
    int status = 0;
    for (int waited_ms = 0; ::waitpid(pid, &status, WNOHANG) == 0; waited_ms += 10) {
        if (waited_ms > 5000) {
            ::kill(pid, SIGKILL), ::waitpid(pid, &status, 0);
            return "did not return within 5 s";
        }
        ::usleep(10000);
    }
    if (WIFSIGNALED(status)) return std::string("crashed (") + strsignal(WTERMSIG(status)) + ")";
    if (WEXITSTATUS(status) == 3) labcheck::not_implemented("layernorm_backward");
    if (WEXITSTATUS(status) == 4) return "threw an exception";
    return "";
}

// A float buffer that a child process's writes reach.
float* shared_floats(const std::vector<float>& init) {
    void* p = ::mmap(nullptr, std::max<size_t>(init.size(), 1) * sizeof(float), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("the check could not map shared memory");
    std::memcpy(p, init.data(), init.size() * sizeof(float));
    return static_cast<float*>(p);
}

void task_adds_and_nulls() {
    unsigned seed = 10;
    for (auto [N, C] : {std::array<int, 2>{5, 7}, {37, 61}}) {
        Data d = make_data(N, C, seed++);
        const Grads start = start_grads(d, false);
        Grads expected = start, fresh = start_grads(d, true);
        spec(expected, d), spec(fresh, d);
        // Every combination of wanted gradients, all three first.
        for (int mask : {7, 6, 5, 3, 1, 2, 4, 0}) {
            const bool given[3] = {bool(mask & 1), bool(mask & 2), bool(mask & 4)};
            float* buf[3];
            for (int k = 0; k < 3; k++) buf[k] = shared_floats(part(start, k));
            std::string where = sizes(N, C);
            if (mask != 7) {
                where += ", with ";
                for (int k = 0; k < 3; k++)
                    if (!given[k]) where += std::string(kNames[k]) + " = ";
                where += "nullptr";
            }
            std::string ended = in_child([&] {
                student::layernorm_backward(given[0] ? buf[0] : nullptr, given[1] ? buf[1] : nullptr,
                                            given[2] ? buf[2] : nullptr, d.dout.data(), d.inp.data(), d.weight.data(),
                                            d.mean.data(), d.rstd.data(), N, C);
            });
            Grads y = start_grads(d, true);
            for (int k = 0; k < 3; k++) {
                std::vector<float>& v = part(y, k);
                std::memcpy(v.data(), buf[k], v.size() * sizeof(float));
                ::munmap(buf[k], std::max<size_t>(v.size(), 1) * sizeof(float));
            }
            if (!ended.empty())
                fail(where + ": your code " + ended,
                     "a null pointer means not wanted: test each one before you write through it (if (dweight) "
                     "...), and compute dweight and dbias whether or not dinp is wanted");
            check_added(y, expected, start, fresh, C, where, given);
        }
    }
}

// ---- task 3: the spec's bits -------------------------------------------------------------------
// The spec's arithmetic with one known change each (Way{} is the spec itself).
struct Way {
    int sums = 0;                  // 0: double sums of double products; 1: float sums (double products);
                                   // 2: float sums of float products; 3: double sums of float products
    bool mean_of_float = false;    // (float)sum, then / C in float
    int order = 0;                 // dinp: 0 (dnorm - m1 - norm * m2) * rstd; 1 (dnorm - norm * m2 - m1) * rstd;
                                   // 2 dnorm * rstd - m1 * rstd - norm * m2 * rstd
    bool dweight_row_by_row = false;   // += into dweight and dbias at every row
    bool norm_dout_first = false;      // dweight sums (inp - mean) * (rstd * dout)
    std::string hint;
};

void backward_way(Grads& g, const Data& d, const Way& w) {
    const int N = d.N, C = d.C;
    for (int n = 0; n < N; n++) {
        const float* x = &d.inp[(size_t)n * C];
        const float* dy = &d.dout[(size_t)n * C];
        const float m = d.mean[(size_t)n], r = d.rstd[(size_t)n];
        double s1 = 0.0, s2 = 0.0;
        float f1 = 0.0f, f2 = 0.0f;
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r, dnorm = d.weight[(size_t)c] * dy[c];
            if (w.sums == 0) s1 += dnorm, s2 += (double)dnorm * norm;
            if (w.sums == 1) f1 += dnorm, f2 += (double)dnorm * norm;
            if (w.sums == 2) f1 += dnorm, f2 += dnorm * norm;
            if (w.sums == 3) s1 += dnorm, s2 += dnorm * norm;
        }
        float m1, m2;
        if (w.sums == 1 || w.sums == 2) m1 = f1 / C, m2 = f2 / C;
        else if (w.mean_of_float) m1 = (float)s1 / C, m2 = (float)s2 / C;
        else m1 = (float)(s1 / C), m2 = (float)(s2 / C);
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r, dnorm = d.weight[(size_t)c] * dy[c];
            float& dx = g.dinp[(size_t)n * C + c];
            if (w.order == 0) dx += (dnorm - m1 - norm * m2) * r;
            if (w.order == 1) dx += (dnorm - norm * m2 - m1) * r;
            if (w.order == 2) dx += dnorm * r - m1 * r - norm * m2 * r;
        }
    }
    std::vector<float> dw((size_t)C, 0.0f), db((size_t)C, 0.0f);
    std::vector<float>& into_w = w.dweight_row_by_row ? g.dweight : dw;
    std::vector<float>& into_b = w.dweight_row_by_row ? g.dbias : db;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)n * C + c;
            const float m = d.mean[(size_t)n], r = d.rstd[(size_t)n];
            into_w[(size_t)c] += w.norm_dout_first ? (d.inp[i] - m) * (r * d.dout[i]) : (d.inp[i] - m) * r * d.dout[i];
            into_b[(size_t)c] += d.dout[i];
        }
    if (w.dweight_row_by_row) return;
    for (int c = 0; c < C; c++) g.dweight[(size_t)c] += dw[(size_t)c], g.dbias[(size_t)c] += db[(size_t)c];
}

std::vector<Way> ways_of_the_sums() {
    std::vector<Way> ways(8);
    ways[0].sums = 1;
    ways[0].hint = "yours matches float accumulators: the spec sums in double (double sum = 0.0; sum += ...), over c "
                   "in increasing order, and rounds each mean to float once";
    ways[1].sums = 2;
    ways[1].hint = "yours matches float accumulators of float products: the spec sums in double, and a product "
                   "going into a double sum is taken in double: (double)dnorm * norm";
    ways[2].sums = 3;
    ways[2].hint = "yours matches dnorm * norm taken in float, then added to the double sum: the spec multiplies in "
                   "double, (double)dnorm * norm";
    ways[3].mean_of_float = true;
    ways[3].hint = "yours matches the sums rounded to float before / C: divide in double, then round once, "
                   "(float)(sum / C)";
    ways[4].order = 1;
    ways[4].hint = "yours matches (dnorm - norm * m2 - m1) * rstd: float subtraction rounds at each step, so keep "
                   "the spec's order, (dnorm - m1 - norm * m2) * rstd, m1 the row mean of dnorm";
    ways[5].order = 2;
    ways[5].hint = "yours matches rstd multiplied into each term: the spec subtracts first and multiplies by rstd "
                   "once, (dnorm - m1 - norm * m2) * rstd";
    ways[6].dweight_row_by_row = true;
    ways[6].hint = "yours matches dweight/dbias added to row by row: sum the rows in a float of your own first (n in "
                   "order), then add that sum to the gradient once";
    ways[7].norm_dout_first = true;
    ways[7].hint = "yours matches (inp - mean) * (rstd * dout): the spec forms norm = (inp - mean) * rstd first, then "
                   "norm * dout";
    return ways;
}

void task_bits() {
    unsigned seed = 20;
    for (auto [N, C] : {std::array<int, 2>{37, 61}, {5, 7}, {1, 1}, {3, 50}, {17, 257}}) {
        Data d = make_data(N, C, seed++);
        Grads y = start_grads(d, false), expected = y;
        yours(y, d), spec(expected, d);
        for (int k = 0; k < 3; k++) {
            std::string differs = first_difference(part(y, k).data(), part(expected, k).data(), part(y, k).size(),
                                                   k == 0 ? (size_t)C : 1, kNames[k]);
            if (differs.empty()) continue;
            std::string hint;
            for (const Way& w : ways_of_the_sums()) {
                Grads theirs = start_grads(d, false);
                backward_way(theirs, d, w);
                if (hint.empty() && !std::memcmp(part(theirs, k).data(), part(y, k).data(), part(y, k).size() * 4))
                    hint = w.hint;
            }
            if (hint.empty() && relative_error(part(y, k), widen(part(expected, k))) > 1e-4)
                hint = "more than rounding differs: make tasks 1 and 2 pass first";
            if (hint.empty())
                hint = "a rounding differs: follow layernorm.hpp's recipe for task 3 line by line (double row sums "
                       "over c in order, (double)dnorm * norm, (float)(sum / C), then the float expression left to "
                       "right; float column sums over n, added once)";
            fail(sizes(N, C) + ": " + differs, hint);
        }
    }
}

// ---- the deliverable: build/lab_02 --fd-sweep --------------------------------------------------
int fd_sweep() {
    const int N = 3, C = 50;
    Data d = make_data(N, C, 7);
    Grads g = start_grads(d, true);
    try {
        yours(g, d);
    } catch (const std::exception& e) {
        std::printf("your layernorm_backward: %s (do task 1 first)\n", printable(e.what()).c_str());
        return 1;
    }
    // L(inp) with the fp32 forward (ops::layernorm_forward), summed in double as in tutorial 02.
    std::vector<float> inp = d.inp, out((size_t)N * C), mean((size_t)N), rstd((size_t)N);
    auto loss = [&] {
        ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), d.weight.data(), d.bias.data(), N,
                               C, kEps);
        double L = 0.0;
        for (size_t i = 0; i < out.size(); i++) L += (double)out[i] * d.dout[i];
        return L;
    };
    double scale = 0.0;
    for (float x : g.dinp) scale = std::max(scale, (double)std::fabs(x));
    const std::vector<double> steps = {1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6};
    std::vector<double> errors;
    for (double h : steps) {
        double err = 0.0;
        for (size_t i = 0; i < inp.size(); i++) {
            const float saved = inp[i];
            inp[i] = saved + (float)h;
            const double up = loss();
            inp[i] = saved - (float)h;
            const double down = loss();
            inp[i] = saved;
            err = std::max(err, std::fabs((up - down) / (2 * h) - g.dinp[i]) / scale);
        }
        errors.push_back(err);
    }
    // The formula's two constants, each from the end of the sweep where its term is alone.
    const double u = std::numeric_limits<float>::epsilon() / 2;   // fp32's unit roundoff
    const double a = errors.front() / (steps.front() * steps.front()), b = errors.back() * steps.back() / u;
    std::printf("dinp of N=%d, C=%d by central differences, (L(inp + h) - L(inp - h)) / 2h with L = sum(dout * out)\n"
                "and out from the fp32 forward (ops::layernorm_forward), against your dinp:\n"
                "error = max |fd - yours| / max |yours|. The formula error(h) = a h^2 + b u / h adds truncation\n"
                "(the Taylor term, a from the largest h) and rounding (L known to u = %.1e relative, divided\n"
                "by 2h; b from the smallest h): a = %.2g, b = %.2g.\n\n",
                N, C, u, a, b);
    std::printf("| h | measured error | formula a h^2 + b u / h |\n| --- | --- | --- |\n");
    size_t best = 0;
    for (size_t k = 0; k < steps.size(); k++) {
        const double h = steps[k];
        std::printf("| %.0e | %.2e | %.2e |\n", h, errors[k], a * h * h + b * u / h);
        if (errors[k] < errors[best]) best = k;
    }
    const double h_star = std::cbrt(b * u / (2 * a));   // where d/dh (a h^2 + b u / h) = 0
    std::printf("\nbest h: measured %.0e (error %.2e); formula h* = (b u / 2a)^(1/3) = %.1e (error %.2e)\n",
                steps[best], errors[best], h_star, a * h_star * h_star + b * u / h_star);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--fd-sweep") return fd_sweep();
    Lab lab{"02", "LayerNorm backward", "labs/02_layernorm/layernorm.cpp", 1, {}};
    lab.tasks.push_back({"gradients: dinp, dweight, dbias within 1e-3 of finite differences (N=5 C=7, N=3 C=50, "
                         "N=2 C=3, N=4 C=33)",
                         "central differences (h = 1e-4) of a float64 LayerNorm forward written in the check",
                         task_finite_differences, "a loop that never ends?", 10});
    lab.tasks.push_back({"contract: adds (+=) into gradients that hold values; any of the three may be null",
                         "the spec, ops::layernorm_backward, adding into the same starting values",
                         task_adds_and_nulls, "a loop that never ends?", 20});
    lab.tasks.push_back({"bits: the spec's bits for dinp, dweight, dbias (N=37 C=61, N=5 C=7, N=1 C=1, N=3 C=50, "
                         "N=17 C=257)",
                         "ops::layernorm_backward (kernels/cpu/layernorm.cpp)", task_bits, "a loop that never ends?",
                         10});
    return run(lab, argc, argv);
}
