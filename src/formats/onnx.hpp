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

namespace pt::onnx {

// One protobuf message being written: fields appended in the order given.
class Message {
 public:
    Message& varint(int field, uint64_t v);                 // int32, int64, enum, bool
    Message& f32(int field, float v);                        // float (fixed32)
    Message& bytes(int field, std::string_view b);           // string, bytes
    Message& message(int field, const Message& m) { return bytes(field, m.data_); }
    const std::string& data() const { return data_; }

 private:
    void key(int field, int wire_type) { put_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
    void put_varint(uint64_t v);
    std::string data_;
};

enum DataType : int { kFloat = 1, kInt64 = 7 };

// A graph under construction. Names are made unique by a counter; every node's output is returned.
class Graph {
 public:
    // An input or output: elem type and dims, a dim < 0 being the named dynamic axis `names`[i].
    void input(const std::string& name, DataType type, const std::vector<int64_t>& dims, const std::vector<std::string>& names);
    void output(const std::string& name, DataType type, const std::vector<int64_t>& dims, const std::vector<std::string>& names);
    // A weight or a constant, row-major.
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
    // The model: ModelProto bytes (IR 8, opset 17). Initializers past `external_after` bytes in
    // total go to `external_file` (its name relative to the model file), whose bytes are appended
    // to *external.
    std::string model(const std::string& producer, size_t external_after, const std::string& external_file,
                      std::string* external) const;

 private:
    struct Init {
        std::string name;
        DataType type;
        std::vector<int64_t> dims;
        std::string raw;   // little-endian values
    };
    std::vector<Message> nodes_, inputs_, outputs_;
    std::vector<Init> inits_;
    int counter_ = 0;
};

inline Graph::Attr attr_int(const std::string& n, int64_t v) { return {n, Graph::Attr::Int, v, 0, {}}; }
inline Graph::Attr attr_float(const std::string& n, float v) { return {n, Graph::Attr::Float, 0, v, {}}; }
inline Graph::Attr attr_ints(const std::string& n, std::vector<int64_t> v) { return {n, Graph::Attr::Ints, 0, 0, std::move(v)}; }

}  // namespace pt::onnx
