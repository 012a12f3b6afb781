// src/formats/onnx.hpp — a small ONNX writer: the protobuf wire format (varints, tags,
// length-prefixed messages) and the few messages a model needs (ModelProto, GraphProto, NodeProto,
// AttributeProto, TensorProto, ValueInfoProto and their shapes), written by hand from onnx.proto's
// field numbers. No protobuf library: a model is a tree of messages written once, front to back.
// Weights past `external_after` bytes go to a side file (ONNX's external data: protobuf messages
// are limited to 2 GB).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/formats/io.hpp"   // Chunk

namespace pt::onnx {

// One protobuf message being written: fields appended in the order given. A field may hold bytes
// that lie elsewhere (bytes_at: a weight), which are not copied: the message keeps a hole for
// them, and pieces() lists its bytes and the holes' in order, for write_chunks_atomic. So a model
// is written without ever being held whole in memory (ERNIE-base: 3.4 GB of peak memory when it
// was, for a 472 MB file); what a hole points at must outlive the message.
class Message {
 public:
    Message& varint(int field, uint64_t v);                 // int32, int64, enum, bool
    Message& f32(int field, float v);                        // float (fixed32)
    Message& bytes(int field, std::string_view b);           // string, bytes
    Message& bytes_at(int field, const void* p, size_t n);   // bytes, not copied
    Message& message(int field, const Message& m);
    size_t size() const { return data_.size() + held_; }
    std::vector<Chunk> pieces() const;

 private:
    struct Hole {
        size_t at;   // in data_
        Chunk bytes;
    };
    void key(int field, int wire_type) { put_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
    void put_varint(uint64_t v);
    std::string data_;
    std::vector<Hole> holes_;
    size_t held_ = 0;   // the holes' bytes
};

enum DataType : int { kFloat = 1, kInt64 = 7 };

// A graph under construction. Names are made unique by a counter; every node's output is returned.
class Graph {
 public:
    // An input or output: elem type and dims, a dim < 0 being the named dynamic axis `names`[i].
    void input(const std::string& name, DataType type, const std::vector<int64_t>& dims, const std::vector<std::string>& names);
    void output(const std::string& name, DataType type, const std::vector<int64_t>& dims, const std::vector<std::string>& names);
    // A weight, row-major: its floats are not copied, and must outlive model()'s message.
    std::string weight(const std::string& name, const std::vector<int64_t>& dims, const float* data);
    std::string ints(const std::vector<int64_t>& values, bool scalar = false);   // an int64 constant
    std::string scalar(float v);                                                // a float constant
    // A node: op_type, inputs, attributes; returns its (single) output's name, or `out` if given.
    struct Attr {
        std::string name;
        enum { Int, Float, Ints } kind;
        int64_t i = 0;
        float f = 0;
        std::vector<int64_t> is;
    };
    std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<Attr>& attrs = {},
                     const std::string& out = "");
    // The model: a ModelProto (IR 8, opset 17). Initializers past `external_after` bytes in total go
    // to `external_file` (its name relative to the model file), whose pieces go to *external (empty
    // on entry). Neither copies an initializer's bytes: the weights and this graph must outlive both.
    Message model(const std::string& producer, size_t external_after, const std::string& external_file,
                  std::vector<Chunk>* external) const;

 private:
    struct Init {
        std::string name;
        DataType type;
        std::vector<int64_t> dims;
        std::string own;                // a constant's little-endian values; empty for a weight
        const void* at = nullptr;       // a weight's, where they lie
        size_t bytes = 0;
        Chunk raw() const { return own.empty() ? Chunk{at, bytes} : Chunk{own.data(), own.size()}; }
    };
    std::vector<Message> nodes_, inputs_, outputs_;
    std::vector<Init> inits_;
    int counter_ = 0;
};

inline Graph::Attr attr_int(const std::string& n, int64_t v) { return {n, Graph::Attr::Int, v, 0, {}}; }
inline Graph::Attr attr_float(const std::string& n, float v) { return {n, Graph::Attr::Float, 0, v, {}}; }
inline Graph::Attr attr_ints(const std::string& n, std::vector<int64_t> v) { return {n, Graph::Attr::Ints, 0, 0, std::move(v)}; }

}  // namespace pt::onnx
