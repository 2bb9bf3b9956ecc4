// src/util/small_vector.hpp: a vector with inline room for N elements, for the per-operation
// scratch arrays of the hot path (one slot per node, one per command or reply). Up to N elements it
// never touches the heap; beyond N it moves to the heap and behaves like std::vector.
//
// Only what redlock uses: growth at the end, clear, resize, indexing, iteration, move. Elements
// must be nothrow-movable (growth moves them); copying the container is not supported.
#ifndef REDLOCK_SRC_SMALL_VECTOR_HPP
#define REDLOCK_SRC_SMALL_VECTOR_HPP

#include <cstddef>
#include <memory>
#include <new>  // placement new
#include <type_traits>
#include <utility>

namespace redlock {
namespace detail {

template <class T, std::size_t N>
class SmallVector {
  static_assert(N > 0, "SmallVector needs inline room for at least one element");
  static_assert(std::is_nothrow_move_constructible_v<T>, "elements are moved when it grows");

 public:
  SmallVector() noexcept = default;
  // (Delegating to the default constructor: if an element throws, the destructor cleans up.)
  explicit SmallVector(std::size_t count) : SmallVector() { resize(count); }
  SmallVector(std::size_t count, const T& value) : SmallVector() {
    reserve(count);
    for (; size_ < count; ++size_) ::new (static_cast<void*>(data_ + size_)) T(value);
  }
  SmallVector(SmallVector&& other) noexcept { take(other); }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  SmallVector(const SmallVector&) = delete;
  SmallVector& operator=(const SmallVector&) = delete;
  ~SmallVector() { release(); }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  void reserve(std::size_t wanted) {
    if (wanted > capacity_) move_to(allocate(wanted), wanted);
  }

  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ < capacity_) {
      ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    } else {
      // Build the new element before moving the old ones: `args` may refer to one of them.
      const std::size_t capacity = 2 * capacity_;
      T* fresh = allocate(capacity);
      try {
        ::new (static_cast<void*>(fresh + size_)) T(std::forward<Args>(args)...);
      } catch (...) {
        std::allocator<T>().deallocate(fresh, capacity);
        throw;
      }
      move_to(fresh, capacity);
    }
    return data_[size_++];
  }
  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }

  // Value-initialises added elements (like std::vector::resize).
  void resize(std::size_t count) {
    reserve(count);
    for (; size_ < count; ++size_) ::new (static_cast<void*>(data_ + size_)) T();
    while (size_ > count) data_[--size_].~T();
  }
  void clear() noexcept { resize_down(); }

 private:
  T* inline_data() noexcept { return reinterpret_cast<T*>(inline_); }
  static T* allocate(std::size_t capacity) { return std::allocator<T>().allocate(capacity); }

  void resize_down() noexcept {
    while (size_ > 0) data_[--size_].~T();
  }
  // Moves the elements into `fresh` (room for `capacity`) and frees the old heap block, if any.
  void move_to(T* fresh, std::size_t capacity) noexcept {
    for (std::size_t i = 0; i < size_; ++i) {
      ::new (static_cast<void*>(fresh + i)) T(std::move(data_[i]));
      data_[i].~T();
    }
    if (data_ != inline_data()) std::allocator<T>().deallocate(data_, capacity_);
    data_ = fresh;
    capacity_ = capacity;
  }
  void release() noexcept {
    resize_down();
    if (data_ != inline_data()) std::allocator<T>().deallocate(data_, capacity_);
    data_ = inline_data();
    capacity_ = N;
  }
  // Takes other's elements (its heap block, or moves them one by one out of its inline room);
  // leaves other empty and inline. Expects this one empty and inline.
  void take(SmallVector& other) noexcept {
    if (other.data_ != other.inline_data()) {
      data_ = other.data_;
      capacity_ = other.capacity_;
      size_ = other.size_;
      other.data_ = other.inline_data();
      other.capacity_ = N;
      other.size_ = 0;
      return;
    }
    for (std::size_t i = 0; i < other.size_; ++i) {
      ::new (static_cast<void*>(data_ + i)) T(std::move(other.data_[i]));
    }
    size_ = other.size_;
    other.resize_down();
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_{inline_data()};
  std::size_t size_{0};
  std::size_t capacity_{N};
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_SMALL_VECTOR_HPP
